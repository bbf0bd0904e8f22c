#!/usr/bin/env bash
# Fills the host's wheel cache once; containers install from it with --no-index.
#   $cache/wheels/double  the SGLang double and setproctitle, for the containers' Pythons (3.9, 3.11, 3.13)
#   $cache/wheels/real    the real sglang wheels, pinned by sha256: installed --no-deps for the patch tests and
#                         read by tests/conformance (never imported or run)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${INFEROPS_CACHE:-$root/.cache}
py=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$cache/wheels/double" "$cache/wheels/real"
dl() { "$py" -m pip download --quiet --no-deps --only-binary=:all: "$@"; }

src_hash=$({ (cd "$root/tests/sglang_double" && { find sglang -name '*.py' | sort; echo pyproject.toml; } | xargs sha256sum)
            sha256sum < "$here/wheels.sh"; } | sha256sum | cut -c1-12)
if [ ! -f "$cache/wheels/double/.src-$src_hash" ]; then
  rm -f "$cache"/wheels/double/sglang-*.whl "$cache"/wheels/double/.src-*
  "$py" -m pip wheel --quiet --no-deps --no-build-isolation -w "$cache/wheels/double" "$root/tests/sglang_double"
  rm -rf "$root/tests/sglang_double/build" "$root"/tests/sglang_double/*.egg-info
  # the same double as 0.5.15+double: what a venv upgraded with `pip install -U sglang` starts from (it emulates
  # the version of the wheel installed)
  old=$(mktemp -d)
  cp -r "$root/tests/sglang_double/sglang" "$root/tests/sglang_double/pyproject.toml" "$old/"
  sed -i 's/^version = "0.5.23+double"$/version = "0.5.15+double"/' "$old/pyproject.toml"
  grep -q '^version = "0.5.15+double"$' "$old/pyproject.toml"
  "$py" -m pip wheel --quiet --no-deps --no-build-isolation -w "$cache/wheels/double" "$old"
  rm -rf "$old"
  touch "$cache/wheels/double/.src-$src_hash"
fi
for w in 39:1.3.7 311:1.3.8 313:1.3.8; do  # Debian 11, 12 and 13's Python (molecule/platforms); 1.3.8 has no cp39
  v=${w%%:*}
  ls "$cache"/wheels/double/setproctitle-*-cp"$v"-*.whl >/dev/null 2>&1 ||
    dl --python-version "${v:0:1}.${v:1}" --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
       -d "$cache/wheels/double" "setproctitle==${w#*:}"
done
# version  sha256 of its wheel (0.5.15+ are cp312 manylinux_2_34 binary wheels; 0.5.5/0.5.9 pure Python)
real=(
  "0.5.5  3c57f135ec0a7a5cf6ae4ed5e0b231d7bf7e0fae588bbc1a881560f1c18db995"
  "0.5.9  8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"
  "0.5.15 b737df527bbba96fe098a02d182e98f72a1b3564d7fc754629041129a5d8edc1"
  "0.5.17 fb4cba478a5dca5ee146550b39f33add1c4e475d21ee11810b86ed1c58068093"
  "0.5.23 8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6"
)
for entry in "${real[@]}"; do
  read -r v sum <<< "$entry"
  whl=$(ls "$cache"/wheels/real/sglang-"$v"-*.whl 2>/dev/null || true)
  if [ -z "$whl" ]; then
    tmp=$(mktemp -d)
    dl --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 -d "$tmp" "sglang==$v"
    whl=$(ls "$tmp"/sglang-"$v"-*.whl)
    mv "$whl" "$cache/wheels/real/" && rmdir "$tmp"
    whl=$cache/wheels/real/$(basename "$whl")
  fi
  if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$sum" ]; then
    echo "wheels.sh: $whl does not have the pinned sha256 $sum; removed" >&2
    rm -f "$whl"
    exit 1
  fi
done
