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
  # First, one at a time, those that time what a server's processes do to a fraction of a second and what a busy
  # scheduler burns (the double's own, and the readiness gate's watchdog against it): beside other tests, even ones
  # at a lower priority, their processes miss the CPU when they need it (lint and sanity, at the lowest, are no
  # matter). Then the others four at once: they mostly wait on processes and sockets. The slowest of each run last,
  # where the stage log's tail shows them.
  local rc=0 timed=(tests/sglang_double/tests tests/unit/roles/systemd_unit/test_inferops_sglang_ready.py)
  pytest -q -p no:cacheprovider --durations=5 "${timed[@]}" || rc=1
  pytest -q -p no:cacheprovider -n 4 --durations=15 "${timed[@]/#/--ignore=}" tests/unit tests/conformance || rc=1
  return $rc
}
stage_lint() {
  # ansible-lint installs the collection into ~/.ansible/collections and keeps it while the version
  # stays the same: a copy from an earlier tree would hide new modules. Start from none.
  rm -rf "$HOME/.ansible/collections/ansible_collections/inferops/sglang"
  ansible-lint --offline || return 1
  # awx/, as a user lints it once awx/requirements.yml is installed: awx.awx from .cache/collections (tests/setup.sh)
  (cd awx && ansible-lint --offline) || return 1
  # the changelog: valid fragments, and CHANGELOG.rst is what antsibull-changelog makes of changelog.yaml
  antsibull-changelog lint || return 1
  antsibull-changelog generate --output tests/output/CHANGELOG.rst && diff -u CHANGELOG.rst tests/output/CHANGELOG.rst
}
stage_sanity() {
  bash tests/sanity.sh
}
stage_checks() {
  # The unit tests, while lint and sanity run beside them at the lowest priority: the unit tests and the molecule
  # scenarios mostly wait (on processes, sockets, servers loading), lint and sanity only compute, in that waiting.
  # Lint and sanity are waited for once every stage ran (checked), each with its own log.
  local st
  for st in lint sanity; do
    { t0=$SECONDS; nice -n 19 bash "$0" "$st"; r=$?; echo "--- $st: $([ $r -eq 0 ] && echo ok || echo FAILED) in $((SECONDS - t0)) s"
      exit $r; } > "tests/output/stage-$st.log" 2>&1 &
    beside+=("$st:$!")
  done
  stage_unit > tests/output/stage-unit.log 2>&1
  local rc=$?
  echo "--- stage unit"; tail -n 60 tests/output/stage-unit.log
  return $rc
}
checked() {
  # the stages that ran beside the others (stage_checks): each waited for; a failed one's log end shown, a passed
  # one's last line only, so that what failed elsewhere stays in a short tail of the whole run
  local st pid rc=0
  for st in "${beside[@]}"; do
    pid=${st#*:} st=${st%%:*}
    if wait "$pid"; then tail -n 1 "tests/output/stage-$st.log"; else rc=1; echo "--- stage $st"; tail -n 40 "tests/output/stage-$st.log"; fi
  done
  return $rc
}
lane() {
  # scenarios one after another, stopping at the first that fails
  local s
  for s in "$@"; do
    local t0=$SECONDS
    echo "--- molecule scenario $s"
    if ! molecule test -s "$s" > "tests/output/molecule-$s.log" 2>&1; then
      echo "molecule scenario $s FAILED after $((SECONDS - t0)) s; its log:"; tail -n 150 "tests/output/molecule-$s.log"
      testbed_state
      echo "$s" >> tests/output/molecule-failed
      return 1
    fi
    grep -E '^(=+ .* (passed|failed).* =+|[a-z_]+ +: actions=|platform [a-z0-9]+: )' "tests/output/molecule-$s.log" || true
    echo "--- molecule scenario $s: $((SECONDS - t0)) s"
  done
}
testbed_state() {
  # at a failure: every container's ID, name, state and address, and the host's neighbours on podman's bridge
  echo "--- test bed at the failure: containers (ID, name, state, address), then the bridge's neighbours"
  podman ps -aq | xargs -r podman inspect --format '{{.Id}} {{.Name}} {{.State.Status}} {{.NetworkSettings.IPAddress}}' 2>&1 | cut -c1-12,65-
  ip neigh show dev "$(podman network inspect podman --format '{{.NetworkInterface}}')" 2>&1
}
bridge_pinned() {
  # Scenarios reach their containers over podman's bridge. Left alone, a Linux bridge takes the lowest MAC of its
  # ports, so a container started or removed in one lane could change it under the other lane's running
  # containers, leaving the host a stale neighbour entry for them (Ansible: "Data could not be sent"). A container
  # kept for the whole stage keeps the bridge up, and its MAC is set once (a set MAC is never recalculated).
  podman rm -f inferops-bridge >/dev/null 2>&1
  podman run -d --name inferops-bridge --ip 10.88.199.1 "$INFEROPS_TESTBED_BASE" sleep infinity >/dev/null || return 1
  local bridge
  bridge=$(podman network inspect podman --format '{{.NetworkInterface}}') || return 1
  ip link set dev "$bridge" address 02:00:0a:58:00:01
}
stage_molecule() {
  bridge_pinned || { echo "could not pin podman's bridge"; return 1; }
  local rc=0
  molecule_lanes "$@" || rc=1
  podman rm -f inferops-bridge >/dev/null 2>&1
  return $rc
}
molecule_lanes() {
  [ $# -eq 0 ] || { lane "$@"; return; }
  # Every scenario, in five lanes at once (the scenarios mostly wait on servers loading), balanced by their times
  # (about 26 minutes the longest lane on a 2-core machine). A lane's scenarios may share container names and SSH
  # ports with each other, never with another lane's: the first lane's scenarios use the default platform
  # `instance`, but cutover and bench, whose hosts no other scenario names. No name is all hex, which podman would
  # also read as an ID prefix (tests/unit/test_testbed_names.py).
  # Scenarios named in no lane run in the last one (fleet, platforms, security, weights).
  # bench measures throughput: it runs last in its lane, when fewer lanes compete for the CPU.
  local lanes=("modules nccl_env sglang_patches systemd_unit testbed cutover bench"
               "ports units multinode progress" "habits faults" "versions release inplace heal" "") s i pids=() rc=0
  for s in molecule/*/molecule.yml; do
    s=$(basename "$(dirname "$s")")
    [[ " ${lanes[*]} " == *" $s "* ]] || lanes[4]+=" $s"
  done
  for i in 0 1 2 3 4; do
    # shellcheck disable=SC2086
    lane ${lanes[$i]} > "tests/output/molecule-lane-$((i + 1)).log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2 3 4; do wait "${pids[$i]}" || rc=1; done
  cat tests/output/molecule-lane-{1,2,3,4,5}.log
  echo "--- molecule lanes"
  for i in 1 2 3 4 5; do
    echo "lane $i: $(sed -n 's/^--- molecule scenario \(.*: [0-9]* s\)$/\1/p' "tests/output/molecule-lane-$i.log" | paste -sd,)"
  done
  molecule_failures
  return $rc
}
molecule_failures() {
  # what failed in the scenarios, short: shown at the stage's end and again at the run's, where a short tail of
  # the whole run still shows it
  local s
  [ -f tests/output/molecule-failed ] || return 0
  while read -r s; do
    echo "--- molecule scenario $s FAILED; its failures:"
    python3 tests/tools/scenario_failures.py "tests/output/molecule-$s.log" 40
  done < tests/output/molecule-failed
}

mkdir -p tests/output
rm -f tests/output/molecule-failed
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(setup checks molecule)
passed=0 failed=0 report=() beside=()
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
if [ ${#beside[@]} -gt 0 ]; then
  echo "=== lint and sanity (beside the other stages)"
  t0=$EPOCHREALTIME
  checked; rc=$?
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}')
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); report+=("lint+sanity ok (waited ${dt}s)"); else failed=$((failed + 1)); report+=("lint+sanity FAILED"); fi
fi
echo
molecule_failures
echo "stage times: ${report[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
