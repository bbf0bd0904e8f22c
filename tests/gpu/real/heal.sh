#!/usr/bin/env bash
# shellcheck disable=SC2016  # the checks are conditions in single quotes, evaluated by ok()
# A service that heals itself, on the GPU machine (run by `run.sh heal`, from the repository's root):
#   heal.sh WORK OUT
# systemd 252 as PID 1 of a pid+mount namespace, as cutover.sh (the functions both share: lib.sh). One real 0.5.15
# server, launched by hand as an operator does (its own HOME, no cache variable: every cache cold), cut over to its
# unit with the smallest liveness thresholds the role takes (a look every second, SGLANG_HEALTH_CHECK_TIMEOUT 1,
# WatchdogSec 13), then:
#   1. liveness: its scheduler stopped (SIGSTOP): systemd's watchdog ends the unit (result `watchdog`), Restart= starts
#      it, it serves again; the status playbook's `restarts` and the metrics textfile count and explain it
#   2. busy, not hung: prompts of growing length (up to ~2 million tokens, each one forward of many seconds, the
#      model's context is 2^21) while /health_generate is asked back to back: it fails (503) for as long as a forward
#      lasts, and the unit is not restarted (NRestarts unchanged). 0.5.15's scheduler answers a health check after
#      every batch (scheduler.py maybe_send_health_check_signal), so a small --chunked-prefill-size keeps it answering;
#      the server's chunk is as long as its token cap, and only a forward longer than WatchdogSec shows the case
#   3. debris: `systemctl kill -s SIGKILL` of the whole tree: the /dev/shm segments 0.5.15 names that it left, counted;
#      after Restart='s start (its ExecStartPre sweep) they are gone, the new server's own are there
#   4. caches: the cold hand launch, the unit's first start after the cutover, and its first start after a power
#      cycle of the namespace's systemd (powered off, booted again: the unit is enabled), each timed; the cache
#      variables of the unit's environment file and their folders' sizes
# OUT gets heal.json (the checks, and `values`: the numbers), flood.json, record-PORT.json and heal-logs.tar.xz.
# HEAL_BUDGET_S (520): the suite ends within it, leaving out what no longer fits (said in heal.json). HEAL_SKIP="busy"
# leaves the busy case out.
set -uo pipefail
work=${1:?usage: heal.sh WORK OUT}
final=${2:?usage: heal.sh WORK OUT}
here=$(cd "$(dirname "$0")" && pwd)
root=$PWD
py=$(command -v python3)
out=$work/logs  # the lib's logs; packed into OUT at the end
mkdir -p "$out" "$final"
results=$final/heal.json
times=$final/heal-values.json
echo '{}' > "$results"
echo '{}' > "$times"
t_suite=$EPOCHREALTIME
# shellcheck source=tests/gpu/real/lib.sh
. "$here/lib.sh"

budget=${HEAL_BUDGET_S:-520}
port=${HEAL_PORT:-30010}
unit=sglang-$port.service
envfile=/etc/inferops/sglang/sglang-$port.env
state=/var/lib/inferops-heal  # outside /tmp (a boot keeps it): the operator's home with its caches, the metrics folder
interval=1 hct=1 wdog=13      # the least the role takes: WatchdogSec > interval + SGLANG_HEALTH_CHECK_TIMEOUT + 10
tokens=2000000 cap=1999000    # the server's token cap; the longest prompt (its gate/up projection stays < 2^31 values)
heal() { ns "$py" "$here/heal.py" "$@"; }
left() { awk -v a="$t_suite" -v b="$EPOCHREALTIME" -v n="$budget" 'BEGIN{printf "%d", n - (b - a)}'; }
finish() {  # the journal, the servers' logs, heal.json with the values, the logs packed (at most a few files back)
  trap - EXIT
  note suite_s "$(now)"
  [ -z "$ns_pid" ] || ns journalctl --no-pager -o short-monotonic -u "$unit" > "$out/journal-${boot:-1}.txt" 2>&1
  for f in "$work"/hand*.log; do [ -e "$f" ] && tail -c 40000 "$f" > "$out/$(basename "$f")"; done
  "$py" - "$results" "$times" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["values"] = json.load(open(sys.argv[2]))
json.dump(r, open(sys.argv[1], "w"), indent=1, sort_keys=True)
EOF
  rm -f "$times"
  tar -cJf "$final/heal-logs.tar.xz" -C "$out" .
  # after the logs are packed: a slow poweroff loses nothing; one not done in 20 s is ended (nothing serves on)
  [ -z "$ns_pid" ] || systemd_poweroff 20 || systemd_end
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); f=[k for k,v in r.items() if k != 'values' and not v['ok']]
print('%d passed, %d failed: %s' % (len(r)-1-len(f), len(f), ' '.join(f))); sys.exit(1 if f else 0)" "$results"
}
trap finish EXIT
show_start() {  # the unit's last start: from leaving inactive (ExecStartPre) and from its main process, to active
  ns systemctl show "$unit" -p InactiveExitTimestampMonotonic -p ExecMainStartTimestampMonotonic \
    -p ActiveEnterTimestampMonotonic | "$py" -c 'import json, sys
v = dict(l.strip().split("=", 1) for l in sys.stdin if "=" in l)
a, m, e = (int(v.get(k) or 0) for k in ("InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic",
                                         "ActiveEnterTimestampMonotonic"))
print(json.dumps({"start_to_active_s": round((e - a) / 1e6, 3) if e > a > 0 else None,
                  "main_to_active_s": round((e - m) / 1e6, 3) if e > m > 0 else None}))'
}
nrestarts() { ns systemctl show -p NRestarts --value "$unit"; }
journal_since() { ns journalctl --no-pager -o cat -u "$unit" --since "@${1%.*}"; }
wait_back() {  # SINCE TIMEOUT: until the unit left active after SINCE and is active again (the watch file); prints it
  local r t0=$SECONDS
  while (( SECONDS - t0 < $2 )); do
    r=$(heal restarts "$out/watch-$boot.jsonl" "$1")
    case $r in *'"active_again": null'*) sleep 0.5 ;; *) echo "$r"; return 0 ;; esac
  done
  echo "$r"
  return 1
}
json_get() { "$py" -c 'import json, sys; v = json.loads(sys.argv[1])
for k in sys.argv[2:]: v = v.get(k) if isinstance(v, dict) else None
print(json.dumps(v) if not isinstance(v, str) else v)' "$@"; }

# --- systemd, the venv, the operator's shell -------------------------------------------------------
rm -rf "$state"
mkdir -p "$state/home" "$state/metrics"
chmod 755 "$state" "$state/metrics"
systemd_install
boot=1
systemd_boot "$out/systemd-1.log"
record systemd_running "$([[ $systemd_state == running || $systemd_state == degraded ]] && echo true || echo false)" "is-system-running: $systemd_state"
make_venv
version=$(awk '{print $2}' "$out/venv.txt")
server_model=$work/models/tiny-long
server_flags=(--tp 1 --attention-backend triton --sampling-backend pytorch --disable-cuda-graph
              --mem-fraction-static 0.3 --max-total-tokens "$tokens" --max-running-requests 8
              --chunked-prefill-size "$tokens" --max-prefill-tokens "$tokens")
server_env "HOME=$state/home"  # no cache variable: each cache where SGLang puts it for this HOME (and /tmp)
heal watch "$unit" "$out/watch-1.jsonl" &

# --- 4a. a hand launch with cold caches ------------------------------------------------------------
t=$EPOCHREALTIME
launch "$port" hand
healthy "$port" 400 hand || fail_all "the hand-launched server never answered /health 200: $(tail -20 "$work/hand.log")"
note cold_hand_start_s "$(since "$t")"
hand_caches=("$state/home/.triton/cache" "$state/home/.cache/flashinfer" "$state/home/.cache/tvm-ffi"
             "$state/home/.cache/sglang" /tmp/torchinductor_root "$state/home/.nv/ComputeCache")
note hand_caches "$(heal sizes "${hand_caches[@]}")"

# --- the cutover, with the least thresholds ---------------------------------------------------------
inv=$(inventory "$port" "      cutover_liveness_interval_sec: $interval
      cutover_watchdog_sec: $wdog
      cutover_environment: {SGLANG_HEALTH_CHECK_TIMEOUT: \"$hct\"}
      cutover_metrics_dir: $state/metrics")
probe=$(prober_start "$port" switch)
prober_ready switch
t=$EPOCHREALTIME
playbook cutover.log "$inv" cutover.yml
rc=$?
healthy "$port" 120
kill "$probe"
note cutover_playbook_s "$(since "$t")"
note switch_gap_s "$(gap_of switch)"
cp "/var/lib/inferops/cutover/$port/last.json" "$final/record-$port.json" 2>/dev/null
record cutover "$(ok '[ "$rc" = 0 ] && ns systemctl is-active -q "$unit"')" "rc $rc; gap $(gap_of switch) s; $(show "$unit")"
[ "$rc" = 0 ] || fail_all "the cutover failed: $(tail -30 "$out/cutover.log")"
note unit_first_start "$(show_start)"
note unit_caches "$(heal caches "$envfile")"
grep -E '^(WatchdogSec|NotifyAccess|ExecStartPre|ExecStartPost)=' "/etc/systemd/system/$unit" > "$out/unit-lines.txt"
record unit_liveness "$(ok 'grep -q "^WatchdogSec=$wdog$" "$out/unit-lines.txt" && grep -q -- "--live 127.0.0.1 $port $interval$" "$out/unit-lines.txt"')" \
  "$(tr '\n' ';' < "$out/unit-lines.txt")"

# --- 1. liveness: the scheduler stopped -----------------------------------------------------------
n0=$(nrestarts)
sched=$(heal schedulers "$unit" | head -1)
t_stop=$EPOCHREALTIME
[ -n "$sched" ] && ns kill -STOP "$sched"
r=$(wait_back "$t_stop" 90)
healthy "$port" 60
serving=$(since "$t_stop")
n1=$(nrestarts)
journal_since "$t_stop" > "$out/journal-liveness.txt"
note liveness "$r"
note liveness_serving_again_s "$serving"
record liveness_watchdog_restart \
  "$(ok '[ -n "$sched" ] && [ "$(json_get "$r" result)" = watchdog ] && [ "$n1" = $((n0 + 1)) ] && healthy "$port" 1 && grep -q "Watchdog timeout" "$out/journal-liveness.txt"')" \
  "scheduler pid ${sched:-none} stopped; result $(json_get "$r" result), left active at $(json_get "$r" left_active) s, active again at $(json_get "$r" active_again) s, serving at $serving s; NRestarts $n0 -> $n1; $(grep -m1 -E 'liveness: no answer' "$out/journal-liveness.txt")"

# --- 2. busy, not hung ----------------------------------------------------------------------------
fb=$(( $(left) - 170 ))  # what debris, status and the power cycle need is kept for them
(( fb > 110 )) && fb=110
if [[ " ${HEAL_SKIP:-} " == *" busy "* ]]; then
  note busy_left_out "\"on purpose (HEAL_SKIP)\""
elif (( fb >= 30 )); then
  n0=$(nrestarts)
  t_busy=$EPOCHREALTIME
  heal flood --port "$port" --cap "$cap" --target $((wdog + 5)) --budget "$fb" --prompts 2 --hct "$hct" \
    --out "$final/flood.json" > "$out/flood.txt" 2>&1
  rc=$?
  sleep 2
  n1=$(nrestarts)
  journal_since "$t_busy" > "$out/journal-busy.txt"
  longest=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["probes"]["longest_without_200_s"])' "$final/flood.json" 2>/dev/null || echo 0)
  busy_said=$(grep -c "but every scheduler is busy" "$out/journal-busy.txt")
  record busy_not_restarted "$(ok '[ "$rc" = 0 ] && [ "$n0" = "$n1" ] && ns systemctl is-active -q "$unit" && healthy "$port" 5')" \
    "NRestarts $n0 -> $n1; $(tail -1 "$out/flood.txt"); the checker said busy $busy_said time(s)"
  record busy_longer_than_watchdog "$(ok 'awk -v l="$longest" -v w="$wdog" "BEGIN{exit !(l > w)}" && [ "$busy_said" -gt 0 ]')" \
    "/health_generate without a 200 for $longest s at most (WatchdogSec $wdog); the checker's busy lines: $busy_said"
else
  record busy_not_restarted false "left out: $(left) s of the budget left"
fi

# --- 3. debris: the whole tree SIGKILLed --------------------------------------------------------------
if (( $(left) >= 110 )); then
  ns systemctl reset-failed "$unit"  # the start limit (3 starts an hour): the kill's restart must not meet it
  pre=$(heal shm "$version")
  t_kill=$EPOCHREALTIME
  ns systemctl kill -s SIGKILL "$unit"
  for _ in $(seq 50); do  # until the tree is gone (Restart= waits RestartSec=10 before the next start)
    case $(ns systemctl show -p SubState --value "$unit") in auto-restart|failed|dead) break ;; esac
    sleep 0.1
  done
  dead=$(heal shm "$version")
  r=$(wait_back "$t_kill" 90)
  healthy "$port" 60
  after=$(heal shm "$version")
  journal_since "$t_kill" > "$out/journal-debris.txt"
  note debris "{\"before\": $pre, \"killed\": $dead, \"after\": $after, \"restart\": $r}"
  verdict=$("$py" - "$dead" "$after" <<'EOF'
import json, sys
dead, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
names = set(s["name"] for s in after["segments"]) | set(o["name"] for o in after["others"])
stayed = sorted(set(dead["left_behind"]) & names)
size = sum(s["bytes"] for s in dead["segments"] if not s["live"])
print("%s left %d segment(s), %d bytes (%s); after the start: %d of them still there%s; the new server's: %d live (%s)" % (
    "ok" if dead["left_behind"] and not stayed and after["live"] else "FAILED", len(dead["left_behind"]), size,
    " ".join(dead["left_behind"]), len(stayed), (" (" + " ".join(stayed) + ")") if stayed else "", len(after["live"]),
    " ".join(after["live"])))
EOF
)
  record debris_swept "$(ok '[[ $verdict == ok* ]] && grep -q "inferops-sglang-sweep-shm: SGLang .*removed [1-9]" "$out/journal-debris.txt"')" \
    "${verdict#* }; $(grep -m1 -o 'inferops-sglang-sweep-shm: .*' "$out/journal-debris.txt")"
else
  record debris_swept false "left out: $(left) s of the budget left"
fi

# --- the restarts, explained: the status playbook and the metrics textfile ----------------------------------
if (( $(left) >= 90 )); then
  playbook status.log "$inv" status.yml
  rc=$?
  prom=$state/metrics/inferops_sglang_$port.prom
  cp "$prom" "$out/" 2>/dev/null
  line=$(grep -m1 '"restarts":' "$out/status.log")
  record status_restarts "$(ok '[ "$rc" = 0 ] && [[ $line == *watchdog* ]]')" "rc $rc; ${line:-no restarts line}"
  record metrics_restarts "$(ok 'grep -Eq "^inferops_sglang_restarts_total\{.*reason=\"watchdog\".*\} [1-9]" "$prom"')" \
    "$(grep '^inferops_sglang_restarts_total' "$prom" 2>&1 | tr '\n' ';')"
fi

# --- 4b. a power cycle: the unit's first start after a boot, the caches kept ----------------------
if (( $(left) >= 75 )); then
  note unit_caches_before_power_cycle "$(heal caches "$envfile")"
  ns journalctl --no-pager -o short-monotonic -u "$unit" > "$out/journal-1.txt" 2>&1
  t=$EPOCHREALTIME
  systemd_poweroff 90
  note poweroff_s "$(since "$t")"
  t=$EPOCHREALTIME
  boot=2
  systemd_boot "$out/systemd-2.log"
  heal watch "$unit" "$out/watch-2.jsonl" &
  note boot_s "$(since "$t")"
  by_boot=false
  for _ in $(seq 40); do  # enabled: the boot starts it (WantedBy=multi-user.target)
    case $(ns systemctl show -p ActiveState --value "$unit") in activating|active) by_boot=true; break ;; esac
    sleep 0.25
  done
  $by_boot || ns systemctl start --no-block "$unit"
  healthy "$port" "$(( $(left) > 30 ? $(left) - 20 : 10 ))"
  note power_cycle_to_ready_s "$(since "$t")"
  note unit_after_power_cycle "$(show_start)"
  note unit_caches_after_power_cycle "$(heal caches "$envfile")"
  record power_cycle "$(ok 'healthy "$port" 1 && ns systemctl is-active -q "$unit"')" \
    "started by the boot: $by_boot; $(show "$unit"); the unit's start: $(show_start)"
else
  record power_cycle false "left out: $(left) s of the budget left"
fi
finish
