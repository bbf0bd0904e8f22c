#!/usr/bin/env bash
# `make demo`: a systemd container with the SGLang double started by hand under nohup, exactly as the
# seeds did (its tree, its health answers while it loads); then the real playbooks/cutover.yml through
# inventories/demo, the cutover report, a restart of the container, and the service ready again.
# KEEP=1 leaves the container running (remove it with `molecule destroy -s testbed`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export NO_COLOR=1 ANSIBLE_FORCE_COLOR=0
mkdir -p tests/output
log=tests/output/demo-setup.log
# The story only: what sets up the test bed (apt, the venv, the image, molecule) goes to a log, shown on failure.
quiet() { "$@" >>"$log" 2>&1 || { echo "failed: $*; the end of $log:"; tail -n 40 "$log"; exit 1; }; }
: >"$log"
echo "== setting up: packages, the venv, the test-bed image (a few minutes the first time; log: $log)"
quiet bash tests/setup.sh
source tests/testbed/env.sh 2>>"$log"
export INFEROPS_SSH_PORT=2299   # the port inventories/demo names
cleanup() { [ "${KEEP:-0}" = 1 ] || molecule destroy -s testbed >/dev/null 2>&1 || true; }
trap cleanup EXIT
echo "== bringing up the test bed (systemd container, SSH on 127.0.0.1:$INFEROPS_SSH_PORT)"
molecule destroy -s testbed >/dev/null 2>&1 || true
quiet molecule create -s testbed
quiet molecule prepare -s testbed
inv=inventories/demo/hosts.yml
run() { ANSIBLE_STDOUT_CALLBACK=minimal ansible -i "$inv" sglang_servers -m ansible.builtin.shell -a "$1" | tail -n +2; }
echo
echo "== before: the server as it was started by hand (nohup, no unit, no supervisor)"
run "ps -eo pid,ppid,pgid,etime,args --forest | grep -E 'sglang|spawn_main|resource_tracker' | grep -v grep"
echo
echo "== health answers while it loads (port closed -> warm-up 503 -> ready 200)"
run "python3 - <<'PY'
import time, urllib.request, urllib.error
def get(p):
    try:
        with urllib.request.urlopen('http://127.0.0.1:30000' + p, timeout=30) as r: return r.status
    except urllib.error.HTTPError as e: return e.code
    except OSError: return 'refused'
t0, last = time.time(), None
while time.time() - t0 < 120:
    now = (get('/v1/models'), get('/health'))
    if now != last:
        print('%6.1f s  /v1/models=%s  /health=%s' % (time.time() - t0, *now)); last = now
    if now[1] == 200: break
    time.sleep(0.2)
PY"
echo
echo "== the log the seeds stared at"
run "tail -n 3 /root/sglang.log"
echo
echo "== the cutover: ansible-playbook -i $inv inferops.sglang.cutover"
ANSIBLE_DISPLAY_SKIPPED_HOSTS=false ansible-playbook -i "$inv" inferops.sglang.cutover
echo
echo "== the report it left on the host"
run "cat /var/lib/inferops/cutover/30000/last.md"
echo
echo "== after: the service's tree"
run "systemd-cgls --no-pager -u sglang-30000.service | cut -c1-150"
echo
echo "== restart the host"
bash "$INFEROPS_ROOT/tests/testbed/restart.sh" instance
for _ in $(seq 1 60); do
  ANSIBLE_STDOUT_CALLBACK=minimal ansible -i "$inv" sglang_servers -m ansible.builtin.ping >/dev/null 2>&1 && break
  sleep 1
done
echo "== after the restart: wait for the service (inferops.sglang.model_wait), then look"
ANSIBLE_STDOUT_CALLBACK=minimal ansible -i "$inv" sglang_servers -m inferops.sglang.model_wait \
  -a "unit=sglang-30000.service timeout=120" | sed -nE 's/^ *"msg": "([^"]*)".*/\1/p'
run "echo \"sglang-30000.service: \$(systemctl is-active sglang-30000.service), \$(systemctl is-enabled sglang-30000.service)\"; \
  echo \"servers on port 30000: \$(pgrep -c -f '[s]glang.launch_server.*--port 30000')\""
