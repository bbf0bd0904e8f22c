#!/usr/bin/env bash
# shellcheck disable=SC2016  # the checks are conditions in single quotes, evaluated by ok()
# Restarts that keep the weights on the GPU, on the GPU machine (run by `run.sh weights`, from the repository's root):
#   weights.sh WORK OUT
# systemd 252 as PID 1 of a pid+mount namespace, as cutover.sh and heal.sh (lib.sh). SGLang 0.5.17 (the server017
# part) and a 16 GB random bf16 Llama made on the GPU (make_model.py --llama8b). WORK must be outside /tmp and
# /var/tmp: the units run with PrivateTmp=yes and would not see a venv or a model there. Steps, in this order (the
# most important first), each a check in OUT/weights.json with its numbers under `values`:
#   cold      the page cache dropped, a hand launch without the cache, timed; SGLang's weight load (`elapsed=`)
#   cache     playbooks/cutover.yml -c local with cutover_weight_cache: true under a 50 ms prober: the daemon's unit
#             active, the server's unit a client of it (PrivateTmp, JoinsNamespaceOf=, Requires=/After=), its journal
#             `Zero-copy: mapped` and a weight load under 1 s, the socket and ready file only in the private /tmp
#   restart   `systemctl restart` of the server's unit under the prober: the gap without a 200, the daemon's MainPID
#             unchanged, SGLang's weight load, where the gap went (the journal's times)
#   flag      the cutover with another --max-running-requests: the daemon's MainPID kept
#   kill      `systemctl kill -s SIGKILL` of the daemon's unit: both back once, in order, NRestarts, no loop, serving
#   badflag   the cutover with a flag SGLang's parser takes and its start refuses (WEIGHTS_BAD_ARGS, default
#             `--max-total-tokens 0`: 0.5.17's KV pool configurator raises "Not enough memory" in the scheduler, after
#             the weights are mapped): rolled back to the previous unit, which maps its weights from the same daemon
#   nocache   the cutover with cutover_weight_cache: false, then the same restart without the cache with a warm page
#             cache and a cold one (drop_caches): the comparison; then a flag change through the cutover without it
# GPU memory per process (nvidia-smi) at each stage. WEIGHTS_BUDGET_S (540, from run.sh's start, 45 s of it kept for
# the finish): a step that no longer fits is left out and
# said so; the logs are packed whatever happens. WEIGHTS_SKIP="restart flag ..." leaves steps out (nocache_warm and
# nocache_cold: one of the restarts without the cache; a second call
# continues the first: `weights.py summary` merges both). Without `cold`, the cutover is given the command
# (cutover_command) instead of capturing a hand-launched server.
set -uo pipefail
work=${1:?usage: weights.sh WORK OUT}
final=${2:?usage: weights.sh WORK OUT}
here=$(cd "$(dirname "$0")" && pwd)
root=$PWD
py=$(command -v python3)
out=$work/logs  # the lib's logs; packed into OUT at the end
mkdir -p "$out" "$final"
results=$final/weights.json
times=$final/weights-values.json
echo '{}' > "$results"
echo '{}' > "$times"
t_suite=$EPOCHREALTIME
# shellcheck source=tests/gpu/real/lib.sh
. "$here/lib.sh"

budget=${WEIGHTS_BUDGET_S:-540}
# the budget counts from run.sh's start (its unpacking and models, the earlier run's namespace ended) and holds what
# finish needs after the last step: the journals, the summary, the pack, the poweroff (20 s) or the namespace's end,
# run.sh's own pack (~25 s in all; the reserve leaves room)
t_call=${INFEROPS_REAL_T0:-$t_suite}
reserve=${WEIGHTS_RESERVE_S:-45}
port=${WEIGHTS_PORT:-30020}
unit=sglang-$port.service
daemon=sglang-$port-weights.service
bad_args=${WEIGHTS_BAD_ARGS:---max-total-tokens 0}
model=$work/models/llama8b
w() { "$py" "$here/weights.py" "$@"; }        # outside the namespace (nvidia-smi's pids are the host's)
wns() { ns "$py" "$here/weights.py" "$@"; }   # inside (systemctl)
left() { awk -v a="$t_call" -v b="$EPOCHREALTIME" -v n="$budget" -v r="$reserve" 'BEGIN{printf "%d", n - r - (b - a)}'; }
capped() { local l; l=$(left); (( l < 1 )) && l=1; echo $(( $1 < l ? $1 : l )); }  # SECONDS: no more than the budget left
skipped() { [[ " ${WEIGHTS_SKIP:-} " == *" $1 "* ]]; }
fits() {  # STEP SECONDS: not skipped and the budget has room, else said so in the results
  if skipped "$1"; then note "left_out_$1" '"on purpose (WEIGHTS_SKIP)"'; return 1; fi
  if (( $(left) < $2 )); then record "$1" false "left out: $(left) s of the budget left, $2 s wanted"; return 1; fi
  return 0
}
with_daemon() {  # STEP SECONDS RECORD: fits, and the daemon's unit it needs is active; else its record says why
  skipped "$1" || ns systemctl is-active -q "$daemon" ||
    { record "$3" false "left out: the daemon's unit is $(ns systemctl is-active "$daemon" 2>&1), not active"; return 1; }
  fits "$1" "$2"
}
json_get() { "$py" -c 'import json, sys; v = json.loads(sys.argv[1])
for k in sys.argv[2:]: v = v.get(k) if isinstance(v, dict) else (v[int(k)] if isinstance(v, list) and len(v) > int(k) else None)
print(json.dumps(v) if not isinstance(v, str) else v)' "$@"; }
cmp_le() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a != "" && a != "null" && b != "" && b != "null" && a + 0 <= b + 0)}'; }
mainpid() { ns systemctl show -p MainPID --value "$1"; }
gpu_note() { note "gpu_$1" "$(w gpu)"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
journal() {  # UNIT SINCE FILE: the unit's journal since SINCE, as JSON lines
  ns journalctl --no-pager -o json -u "$1" --since "@${2%.*}" > "$3" 2>/dev/null
}
finish() {  # the journals, the hand logs, weights.json with the values and the paper, the logs packed
  trap - EXIT
  watch_stop
  kill "${probe:-}" 2>/dev/null
  note suite_s "$(now)"
  note call_s "$(since "$t_call")"
  [ -z "$ns_pid" ] || ns journalctl --no-pager -o short-monotonic -u "$unit" -u "$daemon" > "$out/journal.txt" 2>&1
  for f in "$work"/hand*.log; do [ -e "$f" ] && tail -c 60000 "$f" > "$out/$(basename "$f")"; done
  "$py" - "$results" "$times" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["values"] = json.load(open(sys.argv[2]))
json.dump(r, open(sys.argv[1], "w"), indent=1, sort_keys=True)
EOF
  rm -f "$times"
  w summary --md "$final/weights-summary.md" "$results" > "$final/weights-summary.json" 2>&1
  tar -cJf "$final/weights-logs.tar.xz" -C "$out" .
  # after the logs are packed: a slow poweroff loses nothing; one that did not end in 20 s is ended (nothing of this
  # run may serve on into the next call)
  [ -z "$ns_pid" ] || systemd_poweroff 20 || systemd_end
  "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); f=[k for k,v in r.items() if k != 'values' and not v['ok']]
p=[k for k,v in r.items() if k != 'values' and v['ok']]
print('%d passed, %d failed: %s' % (len(p), len(f), ' '.join(f)))
print('a continuation leaves out what passed: WEIGHTS_SKIP=\"%s\"' % ' '.join(s for s in ('cold','restart','flag','kill','badflag','nocache') if s in p))
sys.exit(1 if f else 0)" "$results"
}
trap finish EXIT
case $work in /tmp/*|/var/tmp/*) fail_all "WORK $work is under /tmp or /var/tmp: the units (PrivateTmp=yes) would not see it" ;; esac

# --- systemd, the venv, the model ------------------------------------------------------------------
systemd_install
systemd_boot "$out/systemd.log"
record systemd_running "$([[ $systemd_state == running || $systemd_state == degraded ]] && echo true || echo false)" "is-system-running: $systemd_state"
make_venv
note venv "\"$(cat "$out/venv.txt")\""
t=$EPOCHREALTIME
if [ ! -e "$model/model.safetensors.index.json" ]; then
  python3 "$here/make_model.py" --llama8b "$work/models" > "$out/llama8b.json" 2> "$out/llama8b.err" ||
    fail_all "make_model.py --llama8b failed: $(tail -5 "$out/llama8b.err")"
fi
note model_made_s "$(since "$t")"
note model_bytes "$(du -sb --apparent-size "$model" | cut -f1)"
server_model=$model
server_flags=(--tp 1 --attention-backend triton --sampling-backend pytorch --disable-cuda-graph
              --mem-fraction-static 0.5 --max-total-tokens 32768 --max-running-requests 16)
server_env HOME=/root "TRITON_CACHE_DIR=$TRITON_CACHE_DIR" "TVM_FFI_CACHE_DIR=$TVM_FFI_CACHE_DIR"
# the watch runs inside the namespace, where the units' systemd is (outside, systemctl has none to ask: the watch of
# the first H100 run read nothing); watch_start (lib.sh): $watcher is its nsenter; it ends by itself once that is gone
watch_start "$here/weights.py" watch "$out/watch.jsonl" "$unit" "$daemon"
gpu_note start

cache_inv() {  # [EXTRA YAML]: the inventory of a cutover with the weight cache on
  local cmd=""
  if skipped cold; then  # no hand-launched server to capture: the command is given, and the environment the hand
    # launch has (senv: the venv's bin first on PATH, where the JIT finds ninja; a unit made from variables alone has
    # systemd's PATH, and its scheduler failed on `ninja` not found)
    cmd="      cutover_command: $("$py" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$venv/bin/python" -m \
      sglang.launch_server --model-path "$model" --host 127.0.0.1 --port "$port" "${server_flags[@]}")
      cutover_environment: $("$py" -c 'import json, sys; print(json.dumps(dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)))' "${senv[@]}")"
  fi
  inventory "$port" "      cutover_weight_cache: ${WC:-true}
$cmd
${1:-}"
}
cutover_step() {  # NAME INVENTORY: the cutover under the prober; rc, gap, the server's journal since it began
  local name=$1 inv=$2
  probe=$(prober_start "$port" "$name")
  prober_ready "$name"
  t_step=$EPOCHREALTIME
  playbook_timeout=$(capped 600) playbook "$name.log" "$inv" cutover.yml  # a step never runs past the budget
  step_rc=$?
  healthy "$port" "$(capped 120)"
  kill "$probe"
  probe=
  journal "$unit" "$t_step" "$out/journal-$name.json"
  journal "$daemon" "$t_step" "$out/journal-$name-daemon.json"
  note "$name" "$(w phases "$out/journal-$name.json" "$t_step" --probes "$out/$name.probes" | \
    "$py" -c 'import json, sys; v = json.load(sys.stdin); v["playbook_s"] = float(sys.argv[1]); v["rc"] = int(sys.argv[2]); print(json.dumps(v))' "$(since "$t_step")" "$step_rc")"
}

# --- cold: a hand launch with the page cache dropped, no weight cache ----------------------------
if ! skipped cold; then
  drop_caches
  t=$EPOCHREALTIME
  note launched_hand "$(now)"
  ns "${senv[@]}" setsid nohup "$venv/bin/python" -m sglang.launch_server --model-path "$model" --host 127.0.0.1 \
    --port "$port" "${server_flags[@]}" < /dev/null 2>&1 | w stamp "$work/hand.log" > /dev/null 2>&1 &
  if healthy "$port" "$(capped 400)" hand; then
    note cold "$(w phases "$work/hand.log" "$t" | "$py" -c 'import json, sys; v = json.load(sys.stdin); v["start_s"] = float(sys.argv[1]); print(json.dumps(v))' "$(since "$t")")"
    gpu_note cold
    gen=$(w generate "$port")
    record cold "$(ok '[ "$(json_get "$gen" status)" = 200 ]')" \
      "to /health 200 in $(since "$t") s; SGLang's weight load $(json_get "$(cat "$times")" cold sglang_weight_load_s) s; generate $gen"
  else
    fail_all "the hand-launched server never answered /health 200: $(tail -20 "$work/hand.log")"
  fi
else
  note left_out_cold '"on purpose (WEIGHTS_SKIP): the cutover is given the command"'
fi

# --- cache: the cutover with the weight cache on --------------------------------------------------
if fits cache 150; then
  cutover_step cache "$(cache_inv)"
  gpu_note cache
  dpid=$(mainpid "$daemon")
  wfiles=$(wns files "$daemon")
  echo "$wfiles" > "$out/files-cache.json"
  for u in "$unit" "$daemon"; do  # as systemd read them (drop-ins included)
    ns systemctl show "$u" -p ExecStart -p Requires -p BindsTo -p After -p JoinsNamespaceOf -p PrivateTmp -p User \
      -p Restart -p RestartUSec | sed "s|^|$u:|"
  done > "$out/unit-lines.txt" 2>&1
  load=$(json_get "$(cat "$times")" cache sglang_weight_load_s)
  record cache "$(ok '[ "$step_rc" = 0 ] && ns systemctl is-active -q "$unit" && ns systemctl is-active -q "$daemon" && healthy "$port" 1')" \
    "rc $step_rc; gap $(json_get "$(cat "$times")" cache gap_s) s; $(show "$unit"); $(show "$daemon") MainPID $dpid"
  record cache_client "$(ok 'grep -q "$unit:ExecStart=.*--weight-cache-mode[ ;]*client" "$out/unit-lines.txt" && grep -Eq "$unit:(Requires|BindsTo)=.*$daemon" "$out/unit-lines.txt" && grep -q "$unit:After=.*$daemon" "$out/unit-lines.txt" && grep -q "$unit:JoinsNamespaceOf=.*$daemon" "$out/unit-lines.txt" && grep -q "$unit:PrivateTmp=yes" "$out/unit-lines.txt" && grep -q "$daemon:PrivateTmp=yes" "$out/unit-lines.txt"')" \
    "$(tr '\n' ';' < "$out/unit-lines.txt" | cut -c1-1500)"
  record cache_zero_copy "$(ok '[ -n "$(json_get "$(cat "$times")" cache zero_copy_tensors | grep -v null)" ] && cmp_le "$load" 0.999')" \
    "Zero-copy: mapped $(json_get "$(cat "$times")" cache zero_copy_tensors) tensors; SGLang's weight load $load s"
  record cache_files_private "$(ok '[ "$(json_get "$wfiles" private sglang_weight_cache_rank0.sock path | grep -c systemd-private)" = 1 ] && [ "$(json_get "$wfiles" shared sglang_weight_cache_rank0.sock)" = false ] && [ "$(json_get "$wfiles" shared sglang_weight_cache_rank0.ready)" = false ]')" \
    "$wfiles"
  one_copy=$("$py" -c 'import json, sys; g = json.loads(sys.argv[1])["by_unit_mib"]; d = g.get(sys.argv[2], 0)
print("true" if d > 15000 and g.get(sys.argv[3], 0) < d else "false")' "$(json_get "$(cat "$times")" gpu_cache)" "$daemon" "$unit")
  record cache_one_copy "$one_copy" \
    "GPU MiB by unit: $(json_get "$(cat "$times")" gpu_cache by_unit_mib)"
fi

# --- restart: systemctl restart of the server's unit, the daemon kept --------------------------------
if with_daemon restart 90 restart; then
  d0=$(mainpid "$daemon")
  probe=$(prober_start "$port" restart)
  prober_ready restart
  t_step=$EPOCHREALTIME
  ns systemctl restart --no-block "$unit"
  sleep 1
  healthy "$port" "$(capped 240)"
  kill "$probe"
  probe=
  journal "$unit" "$t_step" "$out/journal-restart.json"
  note restart "$(wns phases "$out/journal-restart.json" "$t_step" --probes "$out/restart.probes" --unit "$unit")"
  gpu_note restart
  d1=$(mainpid "$daemon")
  v=$(json_get "$(cat "$times")" restart)
  record restart "$(ok '[ "$d0" = "$d1" ] && [ "$d0" != 0 ] && cmp_le "$(json_get "$v" sglang_weight_load_s)" 0.999 && healthy "$port" 1')" \
    "gap $(json_get "$v" gap_s) s; SGLang's weight load $(json_get "$v" sglang_weight_load_s) s; daemon MainPID $d0 -> $d1; phases $(json_get "$v" phases)"
fi

# --- flag: another --max-running-requests through the cutover ------------------------------------
if with_daemon flag 110 flag_change_keeps_daemon; then
  d0=$(mainpid "$daemon")
  s0=$(mainpid "$unit")
  cutover_step flag "$(cache_inv "      cutover_extra_args: [--max-running-requests, \"8\"]")"
  gpu_note flag
  d1=$(mainpid "$daemon")
  s1=$(mainpid "$unit")
  record flag_change_keeps_daemon "$(ok '[ "$step_rc" = 0 ] && [ "$d0" = "$d1" ] && [ "$s0" != "$s1" ] && ns systemctl show -p ExecStart "$unit" | grep -Eq -- "--max-running-requests[ ;]+8( |;|$)" && healthy "$port" 1')" \
    "rc $step_rc; daemon MainPID $d0 -> $d1; server MainPID $s0 -> $s1; gap $(json_get "$(cat "$times")" flag gap_s) s; load $(json_get "$(cat "$times")" flag sglang_weight_load_s) s"
fi

# --- kill: the daemon SIGKILLed -----------------------------------------------------------------------
if with_daemon kill 100 daemon_killed_both_back_once; then
  ns systemctl reset-failed "$unit" "$daemon" 2>/dev/null
  d0=$(mainpid "$daemon")
  s0=$(mainpid "$unit")
  n0s=$(ns systemctl show -p NRestarts --value "$unit")
  n0d=$(ns systemctl show -p NRestarts --value "$daemon")
  t_step=$EPOCHREALTIME
  ns systemctl kill -s SIGKILL "$daemon"
  back=false
  # both back: new main processes, both active, serving (2 min at most). The old server answers for some seconds
  # after its daemon is gone (a check of these alone counted that as back after 1.1 s, then went on while systemd
  # was still starting the two units)
  for _ in $(seq $(( $(capped 120) * 2 ))); do
    d=$(mainpid "$daemon") s=$(mainpid "$unit")
    if [ "$d" != 0 ] && [ "$d" != "$d0" ] && [ "$s" != 0 ] && [ "$s" != "$s0" ] && ns systemctl is-active -q "$daemon" &&
       ns systemctl is-active -q "$unit" && [ "$(status_of "$port")" = 200 ]; then
      back=true; break
    fi
    sleep 0.5
  done
  note kill_back_s "$(since "$t_step")"
  sleep 15  # a loop would show within this (RestartSec=10): a second activation, or a leave of active after the return
  journal "$unit" "$t_step" "$out/journal-kill.json"
  journal "$daemon" "$t_step" "$out/journal-kill-daemon.json"
  once=$(w once "$out/watch.jsonl" "$t_step" "$unit" "$daemon" "$n0d" "$(ns systemctl show -p NRestarts --value "$daemon")")
  b=$(json_get "$once" backs)
  note kill "$once"
  note kill_server "$(wns phases "$out/journal-kill.json" "$t_step" --unit "$unit")"
  gpu_note kill
  wfiles=$(wns files "$daemon")
  ready_t=$(json_get "$wfiles" private sglang_weight_cache_rank0.ready mtime)
  main_t=$(json_get "$(wns phases "$out/journal-kill.json" "$t_step" --unit "$unit")" marks main_start)
  in_order=$(awk -v r="$ready_t" -v s="$t_step" -v m="$main_t" 'BEGIN{print (r != "null" && m != "null" && s + m >= r) ? "true" : "false"}')
  refused=$(grep -c -E 'refused the connection|Daemon config mismatch' "$out/journal-kill.json")
  n1s=$(ns systemctl show -p NRestarts --value "$unit")
  n1d=$(ns systemctl show -p NRestarts --value "$daemon")
  gen=$(w generate "$port")
  once_ok=$(json_get "$once" ok)
  record daemon_killed_both_back_once "$(ok '$back && [ "$once_ok" = true ] && $in_order && [ "$refused" = 0 ] && [ "$(json_get "$gen" status)" = 200 ] && [ "$(mainpid "$daemon")" != "$d0" ] && [ "$(mainpid "$unit")" != "$s0" ]')" \
    "back in $(json_get "$(cat "$times")" kill_back_s) s: $back; once: $once_ok $(json_get "$once" why); daemon active again at $(json_get "$b" "$daemon" active_again), server at $(json_get "$b" "$unit" active_again); NRestarts daemon $n0d -> $n1d, server $n0s -> $n1s; MainPID daemon $d0 -> $(mainpid "$daemon"), server $s0 -> $(mainpid "$unit"); the new server's main process after the ready file: $in_order; refused/mismatch lines $refused; generate $(json_get "$gen" status)"
fi

# --- badflag: an unknown flag through the cutover, rolled back ---------------------------------------
if with_daemon badflag 110 bad_flag_rolled_back; then
  d0=$(mainpid "$daemon")
  cp "/etc/systemd/system/$unit" "$out/unit-before-badflag.service"
  # each text the unit's environment file has during the step (the restart's, then the rollback's): what the
  # restart changed in it restarts the daemon, which shares it
  envfile=/etc/inferops/sglang/sglang-$port.env
  ( n=0 last=
    while sleep 0.2; do
      sum=$(cksum < "$envfile" 2> /dev/null) || continue
      [ "$sum" = "$last" ] || { n=$((n + 1)); cp "$envfile" "$out/env-badflag-$n"; last=$sum; }
    done ) &
  envwatch=$!
  # shellcheck disable=SC2086  # WEIGHTS_BAD_ARGS is words
  bad_yaml=$("$py" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' $bad_args)
  cutover_step badflag "$(cache_inv "      cutover_extra_args: $bad_yaml")"
  kill "$envwatch" 2> /dev/null
  wait "$envwatch" 2> /dev/null
  gpu_note badflag
  d1=$(mainpid "$daemon")
  same_unit=$(cmp -s "/etc/systemd/system/$unit" "$out/unit-before-badflag.service" && echo true || echo false)
  rolled=$(grep -c "ROLLED BACK" "$out/badflag.log")
  j=$out/journal-badflag.json
  # the refused start failed in SGLang (not in the parser: that would be a refusal, no rollback), and the start the
  # rollback made mapped its weights again from the daemon that had served the one before
  why=$(grep -o -m1 -E '(Not enough memory|RuntimeError|ValueError)[^"]{0,160}' "$j")
  mapped=$(grep -c "Zero-copy: mapped" "$j")
  last_load=$(grep -o -E 'Load weight end\. elapsed=[0-9.]+' "$j" | tail -1 | grep -o -E '[0-9.]+$')
  note badflag_rollback "$("$py" -c 'import json, sys; print(json.dumps({"rolled_back_lines": int(sys.argv[1]), "failure": sys.argv[2], "zero_copy_starts": int(sys.argv[3]), "last_weight_load_s": float(sys.argv[4]) if sys.argv[4] else None}))' "$rolled" "$why" "$mapped" "$last_load")"
  record bad_flag_rolled_back "$(ok '[ "$step_rc" != 0 ] && [ "$rolled" -ge 1 ] && [ -n "$why" ] && [ "$mapped" -ge 1 ] && cmp_le "$last_load" 0.999 && $same_unit && [ "$d0" = "$d1" ] && ns systemctl is-active -q "$daemon" && ns systemctl is-active -q "$unit" && healthy "$port" 1')" \
    "rc $step_rc; ROLLED BACK lines $rolled; the failed start: $why; starts that mapped the weights $mapped, the last one's load $last_load s; the unit as before: $same_unit; daemon MainPID $d0 -> $d1; $(grep -m1 -E 'FAILED|fatal|msg' "$out/badflag.log" | cut -c1-300)"
fi

# --- nocache: the same restarts without the weight cache ---------------------------------------------
if fits nocache 200; then
  WC=false cutover_step nocache "$(WC=false cache_inv)"
  gpu_note nocache
  record nocache_cutover "$(ok '[ "$step_rc" = 0 ] && ns systemctl is-active -q "$unit" && ! grep -q -- "--weight-cache-mode" "/etc/systemd/system/$unit" && ! ns systemctl is-active -q "$daemon"')" \
    "rc $step_rc; $(show "$unit"); the daemon's unit: $(ns systemctl is-active "$daemon" 2>&1); GPU $(json_get "$(cat "$times")" gpu_nocache by_unit_mib)"
  for temp in warm cold; do
    if skipped "nocache_$temp"; then note "left_out_nocache_$temp" '"on purpose (WEIGHTS_SKIP)"'; continue; fi
    (( $(left) >= 70 )) || { record "nocache_restart_$temp" false "left out: $(left) s of the budget left"; continue; }
    [ "$temp" = cold ] && drop_caches
    probe=$(prober_start "$port" "nocache-$temp")
    prober_ready "nocache-$temp"
    t_step=$EPOCHREALTIME
    ns systemctl restart --no-block "$unit"
    sleep 1
    healthy "$port" "$(capped 240)"
    kill "$probe"
    probe=
    journal "$unit" "$t_step" "$out/journal-nocache-$temp.json"
    note "nocache_restart_$temp" "$(wns phases "$out/journal-nocache-$temp.json" "$t_step" --probes "$out/nocache-$temp.probes" --unit "$unit")"
    v=$(json_get "$(cat "$times")" "nocache_restart_$temp")
    record "nocache_restart_$temp" "$(ok 'healthy "$port" 1 && [ "$(json_get "$v" sglang_weight_load_s)" != null ]')" \
      "gap $(json_get "$v" gap_s) s; SGLang's weight load $(json_get "$v" sglang_weight_load_s) s; phases $(json_get "$v" phases)"
  done
  if fits nocache_flag 90; then
    WC=false cutover_step nocache_flag "$(WC=false cache_inv "      cutover_extra_args: [--max-running-requests, \"8\"]")"
    v=$(json_get "$(cat "$times")" nocache_flag)
    record nocache_flag "$(ok '[ "$step_rc" = 0 ] && ns systemctl show -p ExecStart "$unit" | grep -Eq -- "--max-running-requests[ ;]+8( |;|$)" && healthy "$port" 1')" \
      "rc $step_rc; gap $(json_get "$v" gap_s) s; SGLang's weight load $(json_get "$v" sglang_weight_load_s) s"
  fi
  gpu_note nocache_end
fi

# --- the done-when's comparison, when both restarts ran in this call --------------------------------------
vals=$(cat "$times")
g=$(json_get "$vals" restart gap_s) wg=$(json_get "$vals" nocache_restart_warm gap_s) wl=$(json_get "$vals" nocache_restart_warm sglang_weight_load_s)
if [ "$g" != null ] && [ "$wg" != null ] && [ "$wl" != null ]; then
  lim=$(awk -v a="$wg" -v b="$wl" 'BEGIN{printf "%.3f", a - b + 1}')
  record restart_gap_within_start_without_read "$(ok 'cmp_le "$g" "$lim"')" \
    "with the cache $g s; without: $wg s of which the weight load $wl s: the start without the read + 1 s = $lim s"
fi
finish
