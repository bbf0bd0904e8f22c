#!/usr/bin/env bash
# ansible-test sanity needs the collection at ansible_collections/NAMESPACE/NAME: copy the
# files git knows (tracked and still there, or untracked and not ignored) into a temporary tree and run it there.
# Every test on the controller's Python; compile and import on each other declared target Python (tests/config.yml:
# 3.6 and newer) this machine has under pyenv. ansible-test knows 3.9 and newer; 3.6 to 3.8 (RHEL 8's platform-python)
# get the same two checks without it: every plugin compiled, every standard-library mechanism imported.
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
[ $# -eq 0 ] || exit 0  # a chosen test: the controller's Python only
known=$(python -c 'from ansible_test._internal.constants import SUPPORTED_PYTHON_VERSIONS as v; print(" ".join(v))')
for bin in /root/.pyenv/versions/3.*/bin; do
  v=$(basename "$(dirname "$bin")"); v=${v%.*}
  if [ "$v" = "$py" ] || [ ! -x "$bin/python$v" ]; then continue; fi
  if [[ " $known " == *" $v "* ]]; then
    echo "--- compile and import on Python $v"
    PATH=$bin:$PATH ansible-test sanity --local --python "$v" --color no --test compile --test import
  else
    echo "--- compile and import (standard-library mechanisms) on Python $v"
    (cd "$tmp" && "$bin/python$v" - <<'PY'
import glob
import importlib
import os
import sys

sys.path.insert(0, os.getcwd())
base = "ansible_collections/inferops/sglang/plugins"
for path in sorted(glob.glob(base + "/modules/*.py") + glob.glob(base + "/module_utils/**/*.py", recursive=True)):
    with open(path) as f:
        compile(f.read(), path, "exec")
mechanisms = [p[len(base + "/module_utils/"):-3].replace("/", ".")
              for p in glob.glob(base + "/module_utils/**/*.py", recursive=True)]
mechanisms = sorted(m for m in mechanisms if not m.startswith("_manager_") and m != "_base" and not m.endswith("__init__"))
for m in mechanisms:
    importlib.import_module(base.replace("/", ".") + ".module_utils." + m)
print("Python %d.%d: compiled every plugin, imported %s" % (sys.version_info[:2] + (", ".join(mechanisms),)))
PY
    )
  fi
done
