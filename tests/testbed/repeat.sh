#!/usr/bin/env bash
# One fault of a molecule scenario, run again and again on one of its hosts: a check that must hold in N runs of N
# (a race shows in some runs only):
#   bash tests/testbed/repeat.sh SCENARIO HOST N TESTS [RESET]
# The scenario is created, prepared and converged once, as `molecule test` does; its tests selected by TESTS
# (pytest's -k) run against the host. Then N-1 times: RESET (a shell command run on the host as root, which sets the
# fault up again), the converge limited to the host, the same tests. The scenario is destroyed at the end, whatever
# happened. Each run's outcome is a line of tests/output/repeat-SCENARIO-HOST.jsonl (its pytest result, its
# seconds, and the host's /var/lib/inferops/cutover/*/last.json as it was then); the exit status is 0 only when every
# run passed. Example, molecule/faults F6c (the rollback's stop of a unit that never served, within its grace):
#   bash tests/testbed/repeat.sh faults fault6c 10 f6c \
#     'rm -f /root/squatter.json; nohup python3 /root/squatter.py > /root/squatter.log 2>&1 &'
set -uo pipefail
scenario=${1:?usage: repeat.sh SCENARIO HOST N TESTS [RESET]}
host=${2:?usage: repeat.sh SCENARIO HOST N TESTS [RESET]}
n=${3:?usage: repeat.sh SCENARIO HOST N TESTS [RESET]}
tests=${4:?usage: repeat.sh SCENARIO HOST N TESTS [RESET]}
reset=${5:-}
case $n in ''|*[!0-9]*|0) echo "repeat.sh: N must be a whole number above 0, not '$n'" >&2; exit 2 ;; esac
[ -d "molecule/$scenario" ] || { echo "repeat.sh: no scenario molecule/$scenario (run from the repository's root)" >&2; exit 2; }
# shellcheck source=tests/testbed/env.sh
source tests/testbed/env.sh || exit 2
mkdir -p tests/output
out=tests/output/repeat-$scenario-$host.jsonl
log=tests/output/repeat-$scenario-$host.log
: > "$out"
: > "$log"
trap 'molecule destroy -s "$scenario" >> "$log" 2>&1' EXIT

inventory() {  # the scenario's inventory as molecule wrote it (its ephemeral folder: the newest)
  local f newest=""
  for f in "$HOME"/.ansible/tmp/molecule.*."$scenario"/inventory; do
    if [ -e "$f" ] && { [ -z "$newest" ] || [ "$f" -nt "$newest" ]; }; then newest=$f; fi
  done
  echo "$newest"
}
ansible_config() {  # molecule's own for the scenario (its SSH settings: no host key checks on the test bed)
  echo "$(dirname "$(inventory)")/ansible.cfg"
}
on_host() {
  ANSIBLE_CONFIG=$(ansible_config) ansible -i "$(inventory)" "$host" -m ansible.builtin.shell -a "$1" 2>>"$log"
}
check() {  # RUN: the tests against the host, and the run's line
  local i=$1 t0=$SECONDS rc
  ANSIBLE_CONFIG=$(ansible_config) PYTHONPATH=$INFEROPS_ROOT/molecule/shared PYTEST_PLUGINS=testinfra_hosts \
    python -m pytest -p no:cacheprovider -q --connection=ansible --ansible-inventory="$(inventory)" \
    --hosts="ansible://$host" -k "$tests" "molecule/$scenario/tests" >> "$log" 2>&1
  rc=$?
  local record
  record=$(on_host 'cat /var/lib/inferops/cutover/*/last.json' | sed -n '/^{/,$p')
  python - "$i" "$rc" "$((SECONDS - t0))" "$record" >> "$out" <<'EOF'
import json, sys
try:
    record = json.loads(sys.argv[4])
except ValueError:
    record = None
print(json.dumps({"run": int(sys.argv[1]), "passed": sys.argv[2] == "0", "pytest_rc": int(sys.argv[2]),
                  "tests_s": int(sys.argv[3]), "last_json": record}, sort_keys=True))
EOF
  echo "run $i: pytest rc $rc" | tee -a "$log"
  return "$rc"
}

for step in dependency destroy create prepare converge; do
  molecule "$step" -s "$scenario" >> "$log" 2>&1 || { echo "repeat.sh: molecule $step failed (see $log)" >&2; exit 1; }
done
failed=0
check 1 || failed=$((failed + 1))
for i in $(seq 2 "$n"); do
  if [ -n "$reset" ]; then
    on_host "$reset" >> "$log" || { echo "repeat.sh: the reset failed on $host (see $log)" >&2; exit 1; }
  fi
  if ! molecule converge -s "$scenario" -- --limit "$host" >> "$log" 2>&1; then
    echo "run $i: the converge failed" | tee -a "$log"
    failed=$((failed + 1))
    continue
  fi
  check "$i" || failed=$((failed + 1))
done
echo "$((n - failed)) of $n runs passed ($out)"
[ "$failed" = 0 ]
