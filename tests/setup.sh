#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine of this kind; a second run reuses it all.
#   apt:  podman (with runc), debootstrap, ssh client, psmisc
#   pip:  .venv (Python 3.12, tests/requirements.txt, pinned)
#   ansible-test: a stand-in for its get-pip bootstrap (its download host is not reachable here)
#   images and wheels: tests/testbed/build-image.sh (cached by recipe hash)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

pkgs=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs openssh-client psmisc shellcheck)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "apt: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-}
if [ -z "$python" ]; then
  for c in /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13; do
    [ -x "$c" ] && python=$c && break
  done
fi
[ -n "$python" ] || { echo "setup: Python 3.12 or 3.13 is needed (ansible-core 2.21 requires it)" >&2; exit 1; }
want=$(sha256sum tests/requirements.txt | cut -c1-16)
if [ "$(cat .venv/.requirements 2>/dev/null)" != "$want" ]; then
  echo "pip: building .venv with $python"
  rm -rf .venv
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python -m pip install -q -r tests/requirements.txt 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python -c 'import ansible, molecule, testinfra, ansible_runner, antsibull_changelog'
  echo "$want" > .venv/.requirements
fi

# ansible-test bootstraps pip in its venvs from a script it downloads; write a stand-in that uses ensurepip.
pip_version=$(.venv/bin/python -c 'from ansible_test._internal.python_requirements import get_venv_packages as g; import inspect, re; print(re.search(r"pip=.(\d[\d.]*)", inspect.getsource(g)).group(1))')
getpip=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -f "$getpip" ]; then
  mkdir -p "$(dirname "$getpip")"
  cat > "$getpip" <<'PY'
# Stand-in for ansible-test's get-pip bootstrap, written by inferops.sglang's tests/setup.sh.
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap()
os.environ.pop("PIP_CONFIG_FILE", None)  # ensurepip points it at /dev/null, hiding the machine's CA setting
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
PY
fi

# The release checks' tools (tests/release/requirements.txt) in a venv of their own.
want=$(sha256sum tests/release/requirements.txt | cut -c1-16)
if [ "$(cat .venv-release/.requirements 2>/dev/null)" != "$want" ]; then
  echo "pip: building .venv-release with $python"
  rm -rf .venv-release
  "$python" -m venv .venv-release
  .venv-release/bin/python -m pip install -q -r tests/release/requirements.txt 2>&1 | grep -v 'is ignored' || true
  .venv-release/bin/python -c 'import galaxy_importer, ansible_builder'
  echo "$want" > .venv-release/.requirements
fi

# awx.awx, for awx/configure.yml's syntax and argument checks: the `ansible` package carried it up to 9.x.
awx=.cache/collections/ansible_collections/awx/awx
if [ ! -f "$awx/MANIFEST.json" ]; then
  echo "pip: awx.awx from ansible 9.13.0"
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --no-deps -d "$tmp" ansible==9.13.0 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python - "$tmp"/ansible-9.13.0-py3-none-any.whl .cache/collections <<'PY'
import sys
import zipfile

wheel = zipfile.ZipFile(sys.argv[1])
wheel.extractall(sys.argv[2], [n for n in wheel.namelist() if n.startswith("ansible_collections/awx/awx/")])
PY
  rm -rf "$tmp"
  test -f "$awx/MANIFEST.json"
fi
