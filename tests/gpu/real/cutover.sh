#!/usr/bin/env bash
# shellcheck disable=SC2016  # the checks are conditions in single quotes, evaluated by ok()
# The whole cutover under systemd on the GPU machine (run by `run.sh cutover`, from the repository's root):
#   cutover.sh WORK OUT
# WORK holds the unpacked parts (server/, ansible/, debs/) and models/. The machine has no systemd: Debian 12's
# systemd 252 runs as PID 1 of a new pid and mount namespace (`unshare --fork --pid --mount-proc --mount`), with a
# D-Bus daemon for the transient scopes of `cutover_mode: adopt`; everything meant for it (the hand-launched
# servers, ansible-playbook with a local connection, the probes) runs inside, through nsenter. Processes outside
# (the modules suite's servers, run at the same time) are not in its pid namespace: no cutover sees them.
# The servers run from a venv (WORK/venv) that finds the bundle and the machine's torch through a .pth file, as an
# SGLang install does: the switch asks that interpreter, with a clean environment, for SGLang's version.
# Steps, each a check in OUT/cutover.json; times in OUT/cutover-times.json:
#   1. a real 0.5.15 server launched by hand with nohup; the cutover (playbooks/cutover.yml) under a 50 ms prober;
#      the unit active and still active 30 s later with NRestarts 0; the record; a rerun with 0 changed;
#      `systemctl restart` under the prober; the status playbook
#   2. another hand-launched server cut over with `cutover_mode: adopt` under the prober (0 failed probes wanted),
#      then the unit's first start (the scope stopped: the service takes over)
#   3. a hand-launched server whose unit cannot start (cutover_environment CUDA_VISIBLE_DEVICES=7: no such GPU, which
#      no check before the start can see): the cutover fails and the hand-launched command serves again (rolled back)
# Parts 1 and 3 switch with nothing else of theirs on the GPU (another server there would be a stray the switch
# refuses to stop): part 3's cutover runs once the units of 1 and 2 are stopped.
set -uo pipefail
work=${1:?usage: cutover.sh WORK OUT}
out=${2:?usage: cutover.sh WORK OUT}
root=$PWD
py=$(command -v python3)
results=$out/cutover.json
times=$out/cutover-times.json
echo '{}' > "$results"
echo '{}' > "$times"
t_suite=$EPOCHREALTIME
# shellcheck source=tests/gpu/real/lib.sh
. "$(dirname "$0")/lib.sh"

systemd_install
systemd_boot "$out/systemd.log"
record systemd_running "$([[ $systemd_state == running || $systemd_state == degraded ]] && echo true || echo false)" "is-system-running: $systemd_state"
record dbus "$(ns busctl --system list >/dev/null 2>&1 && echo true || echo false)" "busctl list"
make_venv
# what an operator's shell has when it launches the server: no PYTHONPATH (the venv finds its packages)
server_env HOME=/root "TRITON_CACHE_DIR=$TRITON_CACHE_DIR" "TVM_FFI_CACHE_DIR=$TVM_FFI_CACHE_DIR"

# --- 1. the cutover of a hand-launched server -----------------------------------------------------
launch 30000 hand-30000
healthy 30000 400 hand-30000 || fail_all "the hand-launched server never answered /health 200: $(tail -20 "$work/hand-30000.log")"
inv=$(inventory 30000)
probe=$(prober_start 30000 switch)
prober_ready switch
t0=$EPOCHREALTIME
playbook cutover-1.log "$inv" cutover.yml
rc=$?
healthy 30000 60
kill "$probe"
note switch_gap_s "$(gap_of switch)"
note cutover_playbook_s "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')"
record cutover "$(ok '[ "$rc" = 0 ] && [ -n "$(changed_of cutover-1.log)" ] && ns systemctl is-active -q sglang-30000.service')" "rc $rc; failed probes $(failed_probes switch) of $(wc -l < "$out/switch.probes"), gap $(gap_of switch) s"
unit=sglang-30000.service
a1=$(show $unit)
# 2. (adopt) launched now: it loads while the unit is watched for 30 s (adopt refuses nothing for a neighbour)
launch 30001 hand-30001
sleep 30
a2=$(show $unit)
record unit_active "$([[ $a1 == *ActiveState=active* && $a2 == *ActiveState=active* && $a2 == *NRestarts=0* ]] && echo true || echo false)" "$unit: $a1 / 30 s later: $a2"
cp /var/lib/inferops/cutover/30000/last.json "$out/record-30000.json" 2>/dev/null
record record "$(ok '[ -s /var/lib/inferops/cutover/30000/last.json ]')" "$(find /var/lib/inferops/cutover/30000/ -maxdepth 1 -type f -printf '%f %m %s; ' 2>&1)"
playbook cutover-2.log "$inv" cutover.yml
rc=$?
record rerun_changes_nothing "$(ok '[ "$rc" = 0 ] && [ "$(changed_of cutover-2.log)" = 0 ]')" "rc $rc, changed=$(changed_of cutover-2.log)"
probe=$(prober_start 30000 restart)
prober_ready restart
t0=$(now)
ns systemctl restart --no-block $unit
sleep 1
healthy 30000 300
kill "$probe"
note restart_gap_s "$(gap_of restart)"
record systemctl_restart "$(ok 'healthy 30000 1 && ns systemctl is-active -q "$unit"')" "failed probes $(failed_probes restart) of $(wc -l < "$out/restart.probes"), gap $(gap_of restart) s; $(show $unit)"
playbook status.log "$inv" status.yml
rc=$?
record status "$(ok '[ "$rc" = 0 ] && grep -q "\"health\": 200" "$out/status.log"')" "rc $rc, $(grep -c . "$out/status.log") lines"

# --- 2. cutover_mode: adopt -------------------------------------------------------------------
# 3.'s server loads meanwhile: part 3 switches only once 1.'s and 2.'s units are stopped
launch 30002 hand-30002
healthy 30001 300 hand-30001
inv=$(inventory 30001 "      cutover_mode: adopt")
probe=$(prober_start 30001 adopt)
prober_ready adopt
playbook adopt.log "$inv" cutover.yml
rc=$?
sleep 1
kill "$probe"
record adopt "$(ok '[ "$rc" = 0 ] && [ "$(failed_probes adopt)" = 0 ]')" "rc $rc, failed probes $(failed_probes adopt) of $(wc -l < "$out/adopt.probes")"
scope=$(ns systemctl list-units --type=scope --no-legend --plain | awk '/sglang-30001/ {print $1}' | head -1)
record adopted_in_scope "$(ok '[ -n "$scope" ] && ns systemctl is-active -q "$scope"')" "${scope:-no scope}: $(show "${scope:-none}")"
# the service's first start: it conflicts with the scope, which systemd stops first (the watcher drains the server)
probe=$(prober_start 30001 first-start)
prober_ready first-start
ns systemctl start --no-block sglang-30001.service
sleep 1
healthy 30001 300
kill "$probe"
note first_start_gap_s "$(gap_of first-start)"
record adopt_first_start "$(ok 'healthy 30001 1 && ns systemctl is-active -q sglang-30001.service && ! ns systemctl is-active -q "$scope"')" \
  "$(show sglang-30001.service); the scope $(ns systemctl is-active "$scope"); gap $(gap_of first-start) s"

# --- 3. a start that fails: rolled back to the hand-launched server ------------------------------
ns systemctl disable --now sglang-30000.service sglang-30001.service > /dev/null 2>&1
healthy 30002 300 hand-30002
inv=$(inventory 30002 "      cutover_environment: {CUDA_VISIBLE_DEVICES: \"7\"}")
playbook rollback.log "$inv" cutover.yml
rc=$?
healthy 30002 300
back=$(ns pgrep -f "sglang.launch_server .*--port 30002( |$)" | head -1)
cp /var/lib/inferops/cutover/30002/last.json "$out/record-30002.json" 2>/dev/null
record rolled_back "$(ok '[ "$rc" != 0 ] && grep -q "ROLLED BACK" "$out/rollback.log" && healthy 30002 1 && [ -n "$back" ]')" \
  "playbook rc $rc; serving again: pid ${back:-none}; $(show sglang-30002.service)"

note suite_s "$(now)"
for f in "$work"/hand-*.log; do tail -c 20000 "$f" > "$out/$(basename "$f")"; done
ns journalctl --no-pager -o short-monotonic -u 'sglang-*' > "$out/journal.txt" 2>&1
ns systemctl poweroff >/dev/null 2>&1 || kill "$ns_pid"
"$py" -c "import json,sys; r=json.load(open(sys.argv[1])); f=[k for k,v in r.items() if not v['ok']]; print('%d passed, %d failed' % (len(r)-len(f), len(f))); sys.exit(1 if f else 0)" "$results"
