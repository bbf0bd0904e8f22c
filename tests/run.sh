#!/usr/bin/env bash
# The test stages behind `make test`, each timed. `tests/run.sh STAGE...` runs some of them:
#   setup unit lint sanity molecule[:SCENARIO]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
export NO_COLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 PY_COLORS=0 PYTHONDONTWRITEBYTECODE=1

stage_setup() {
  bash tests/setup.sh && source tests/testbed/env.sh
}
stage_unit() {
  pytest -q -p no:cacheprovider tests/unit tests/sglang_double/tests
}
stage_lint() {
  # ansible-lint installs the collection into ~/.ansible/collections and keeps it while the version
  # (0.1.0) stays the same: a copy from an earlier tree would hide new modules. Start from none.
  rm -rf "$HOME/.ansible/collections/ansible_collections/inferops/sglang"
  ansible-lint --offline
}
stage_sanity() {
  bash tests/sanity.sh
}
stage_molecule() {
  local scenarios=("$@")
  if [ ${#scenarios[@]} -eq 0 ]; then
    # every scenario but those whose molecule.yml says "# not in make test" (run them with make molecule S=NAME)
    mapfile -t scenarios < <(for f in molecule/*/molecule.yml; do
      grep -q '^# not in make test' "$f" || basename "$(dirname "$f")"; done)
  fi
  local s rc=0
  for s in "${scenarios[@]}"; do
    local t0=$SECONDS
    echo "--- molecule scenario $s"
    molecule test -s "$s" > "tests/output/molecule-$s.log" 2>&1 || {
      rc=1; echo "molecule scenario $s FAILED; its log:"; tail -n 150 "tests/output/molecule-$s.log"; }
    grep -E '^(=+ .* (passed|failed).* =+|[a-z_]+ +: actions=)' "tests/output/molecule-$s.log" || true
    echo "--- molecule scenario $s: $((SECONDS - t0)) s"
    [ $rc -eq 0 ] || break
  done
  return $rc
}

mkdir -p tests/output
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(setup unit lint sanity molecule)
passed=0 failed=0 report=()
for st in "${stages[@]}"; do
  name=${st%%:*}
  args=()
  [[ $st == *:* ]] && IFS=, read -ra args <<< "${st#*:}"
  if [ "$name" != setup ] && [ -z "${INFEROPS_TESTBED_IMAGE:-}" ]; then
    bash tests/setup.sh >/dev/null && source tests/testbed/env.sh || exit 1
  fi
  echo "=== stage $name"
  t0=$EPOCHREALTIME
  "stage_$name" "${args[@]}"
  rc=$?
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}')
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); report+=("$name ${dt}s ok"); else failed=$((failed + 1)); report+=("$name ${dt}s FAILED"); fi
  echo "=== stage $name: $([ $rc -eq 0 ] && echo ok || echo FAILED) in ${dt} s"
  [ $rc -eq 0 ] || break
done
echo
echo "stage times: ${report[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
