#!/usr/bin/env bash
# ansible-test sanity needs the collection at ansible_collections/NAMESPACE/NAME: copy the
# files git knows (tracked and still there, or untracked and not ignored) into a temporary tree and run it there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/ansible_collections/inferops/sglang
mkdir -p "$dest"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -C "$dest" -xf -
cd "$dest"
py=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ansible-test sanity --local --python "$py" --color no "$@"
