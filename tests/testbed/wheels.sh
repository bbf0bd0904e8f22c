#!/usr/bin/env bash
# Fills the host's wheel cache once; containers install from it with --no-index.
#   $cache/wheels/double  the SGLang double and setproctitle, for the containers' Pythons (3.9, 3.11, 3.13)
#   $cache/wheels/real    real sglang wheels, installed --no-deps for the patch tests (never imported)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${INFEROPS_CACHE:-$root/.cache}
py=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$cache/wheels/double" "$cache/wheels/real"
dl() { "$py" -m pip download --quiet --no-deps --only-binary=:all: "$@"; }

src_hash=$(cd "$root/tests/sglang_double" && { find sglang -name '*.py' | sort; echo pyproject.toml; } | xargs sha256sum | sha256sum | cut -c1-12)
if [ ! -f "$cache/wheels/double/.src-$src_hash" ]; then
  rm -f "$cache"/wheels/double/sglang-*.whl "$cache"/wheels/double/.src-*
  "$py" -m pip wheel --quiet --no-deps --no-build-isolation -w "$cache/wheels/double" "$root/tests/sglang_double"
  rm -rf "$root/tests/sglang_double/build" "$root"/tests/sglang_double/*.egg-info
  touch "$cache/wheels/double/.src-$src_hash"
fi
for w in 39:1.3.7 311:1.3.8 313:1.3.8; do  # Debian 11, 12 and 13's Python (molecule/platforms); 1.3.8 has no cp39
  v=${w%%:*}
  ls "$cache"/wheels/double/setproctitle-*-cp"$v"-*.whl >/dev/null 2>&1 ||
    dl --python-version "${v:0:1}.${v:1}" --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
       -d "$cache/wheels/double" "setproctitle==${w#*:}"
done
for v in 0.5.23 0.5.9; do
  ls "$cache"/wheels/real/sglang-$v-*.whl >/dev/null 2>&1 || dl -d "$cache/wheels/real" "sglang==$v"
done
