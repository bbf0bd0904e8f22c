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
record() {  # NAME OK DETAIL: one check into OUT/cutover.json
  "$py" - "$results" "$1" "$2" "$3" <<'EOF'
import json, sys
path, name, ok, detail = sys.argv[1:]
r = json.load(open(path))
r[name] = {"ok": ok == "true", "detail": detail}
json.dump(r, open(path, "w"), indent=1, sort_keys=True)
EOF
  echo "$(awk -v a="$t_suite" -v b="$EPOCHREALTIME" 'BEGIN{printf "%6.1f", b-a}') $1: $2 $3"
}
note() {  # NAME VALUE: a number into OUT/cutover-times.json
  "$py" - "$times" "$1" "$2" <<'EOF'
import json, sys
path, name, value = sys.argv[1:]
r = json.load(open(path))
r[name] = json.loads(value)
json.dump(r, open(path, "w"), indent=1, sort_keys=True)
EOF
}
now() { awk -v a="$t_suite" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'; }
fail_all() { record setup false "$1"; exit 1; }

# --- systemd and dbus from the .debs --------------------------------------------------------------
libs=$work/deb-libs
mkdir -p "$libs"
for d in "$work"/debs/*.deb; do
  case $(basename "$d") in
    systemd_*|libsystemd-shared_*|dbus_*|dbus-bin_*|dbus-daemon_*|dbus-system-bus-common_*|dbus-session-bus-common_*)
      # into / through its links: `dpkg-deb -x` would replace a merged /usr's /lib and /bin links with folders
      dpkg-deb --fsys-tarfile "$d" | tar -x --keep-directory-symlink -C / ;;
    *) dpkg-deb --fsys-tarfile "$d" | tar -x --keep-directory-symlink -C "$libs" ;;  # libraries the machine lacks, searched after its own
  esac
done
printf '%s\n' "$libs/lib/x86_64-linux-gnu" "$libs/usr/lib/x86_64-linux-gnu" > /etc/ld.so.conf.d/zz-inferops-deb12.conf
ldconfig
missing=$(ldd /lib/systemd/systemd /usr/bin/dbus-daemon 2>&1 | grep "not found" || true)
[ -z "$missing" ] || fail_all "libraries not found: $missing"
getent group messagebus >/dev/null || groupadd -r messagebus
getent passwd messagebus >/dev/null || useradd -r -g messagebus -d /nonexistent -s /usr/sbin/nologin messagebus

# the namespace shares the machine's file systems: its boot must not empty /tmp (systemd-tmpfiles-setup's --remove)
for u in systemd-tmpfiles-setup.service systemd-tmpfiles-clean.timer systemd-tmpfiles-clean.service; do
  ln -sfn /dev/null "/etc/systemd/system/$u"
done
setsid env -i container=other PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  unshare --fork --pid --mount-proc --mount --propagation private /bin/sh -c 'exec /lib/systemd/systemd --system' \
  > "$out/systemd.log" 2>&1 < /dev/null &
ns_pid=
for _ in $(seq 100); do
  ns_pid=$(pgrep -x systemd -P "$(pgrep -n -x unshare)" 2>/dev/null || true)
  [ -n "$ns_pid" ] && break
  sleep 0.1
done
[ -n "$ns_pid" ] || fail_all "systemd did not start: $(tail -5 "$out/systemd.log")"
ns() { nsenter -t "$ns_pid" -m -p "$@"; }
for _ in $(seq 120); do
  state=$(ns systemctl is-system-running 2>/dev/null || true)
  case $state in running|degraded) break ;; esac
  sleep 0.5
done
record systemd_running "$([[ $state == running || $state == degraded ]] && echo true || echo false)" "is-system-running: $state"
ns systemctl start dbus.socket dbus.service >/dev/null 2>&1 || true
record dbus "$(ns busctl --system list >/dev/null 2>&1 && echo true || echo false)" "busctl list"

# --- the servers' venv, and what the playbooks run with -------------------------------------------
venv=$work/venv
"$py" -m venv --without-pip "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
machine=$(env -u PYTHONPATH "$py" -c 'import site; print(" ".join(site.getsitepackages()))')
# the bundle first (its transformers and tokenizers shadow the machine's), then the machine's torch and the rest
echo "import site; [site.addsitedir(d) for d in '$work/server $machine'.split()]" > "$site/inferops-bundle.pth"
env -i PATH=/usr/bin:/bin "$venv/bin/python" -c 'import importlib.metadata as m, importlib.util as u
print("sglang", m.version("sglang"), "torch", m.version("torch") if u.find_spec("torch") else None)' \
  > "$out/venv.txt" 2>&1 || fail_all "the venv does not find sglang: $(tail -3 "$out/venv.txt")"
mkdir -p "$work/collections/ansible_collections/inferops"
ln -sfn "$root" "$work/collections/ansible_collections/inferops/sglang"
# what an operator's shell has when it launches the server: no PYTHONPATH (the venv finds its packages)
# (SERVER_ENV: more NAME=VALUE words, e.g. the SGLang double's knobs for a rehearsal on a CPU)
read -r -a server_env <<< "${SERVER_ENV:-}"
senv=(env -i "PATH=$venv/bin:$PATH" HOME=/root LANG=C.UTF-8 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
      "TRITON_CACHE_DIR=$TRITON_CACHE_DIR" "TVM_FFI_CACHE_DIR=$TVM_FFI_CACHE_DIR" NCCL_NVLS_ENABLE=0
      TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 "${server_env[@]}")
inventory() {  # PORT [EXTRA YAML]: an inventory for this host, a local connection
  cat > "$work/inventory-$1.yml" <<EOF
sglang_servers:
  hosts:
    localhost:
      ansible_connection: local
      ansible_python_interpreter: $py
      cutover_port: $1
      cutover_drain_sec: 30
      cutover_timeout_start_sec: 400
${2:-}
EOF
  echo "$work/inventory-$1.yml"
}
playbook() {  # LOG INVENTORY PLAYBOOK [ARGS]: ansible-playbook inside the namespace
  local log=$1 inv=$2 pb=$3
  shift 3
  ns env -i "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LANG=C.UTF-8 \
    "PYTHONPATH=$work/ansible" "ANSIBLE_COLLECTIONS_PATH=$work/collections" ANSIBLE_LOCALHOST_WARNING=0 \
    ANSIBLE_NOCOLOR=1 ANSIBLE_FORKS=1 "$py" -m ansible playbook -i "$inv" "$root/playbooks/$pb" "$@" > "$out/$log" 2>&1
}
launch() {  # PORT NAME [ARGS]: a server started by hand inside the namespace, as operators do; its start noted
  local port=$1 name=$2
  shift 2
  note "launched_$name" "$(now)"
  ns "${senv[@]}" setsid nohup "$venv/bin/python" -m sglang.launch_server --model-path "$work/models/tiny" \
    --host 127.0.0.1 --port "$port" --tp 1 --attention-backend triton --sampling-backend pytorch --disable-cuda-graph \
    --mem-fraction-static 0.3 --max-total-tokens 32768 "$@" > "$work/$name.log" 2>&1 < /dev/null &
}
status_of() {  # PORT: the status code of GET /health (000: no answer)
  "$py" -c 'import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")' "$1"
}
healthy() {  # PORT TIMEOUT [NAME]: until /health answers 200; with NAME (a hand launch), when noted as ready_NAME,
  # and no longer than that server lives (a launch that died at its first forward fails now, not at TIMEOUT)
  local t0=$SECONDS
  while (( SECONDS - t0 < $2 )); do
    if [ "$(status_of "$1")" = 200 ]; then
      [ -z "${3:-}" ] || note "ready_$3" "$(now)"
      return 0
    fi
    if [ -n "${3:-}" ] && (( SECONDS - t0 > 10 )) && ! pgrep -f "sglang.launch_server .*--port $1( |$)" > /dev/null; then
      return 1
    fi
    sleep 0.2
  done
  return 1
}
prober_start() {  # PORT NAME: GET /health every 50 ms into OUT/NAME.probes (time code), until killed
  "$py" -u -c 'import sys, time, urllib.request, urllib.error
while True:
    try:
        code = urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=2).status
    except urllib.error.HTTPError as e:
        code = e.code
    except Exception:
        code = 0
    print("%.3f %s" % (time.time(), code))
    time.sleep(0.05)' "$1" > "$out/$2.probes" 2>/dev/null &
  echo $!
}
failed_probes() { awk '$2 != 200 {n++} END {print n + 0}' "$out/$1.probes"; }
prober_ready() {  # NAME: waits (10 s at most) until the prober has seen a 200, so that a gap starts from one
  for _ in $(seq 200); do
    grep -q ' 200$' "$out/$1.probes" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
gap_of() {  # NAME: seconds from the last 200 before the first failed probe to the first 200 after the last one
  awk '$2 == 200 && !bad {last = $1} $2 != 200 {bad = 1; end = 0} $2 == 200 && bad && !end {end = $1}
       END {if (bad && end && last) printf "%.3f", end - last; else print "null"}' "$out/$1.probes"
}
changed_of() { grep -Eo 'changed=[0-9]+' "$out/$1" | tail -1 | cut -d= -f2; }
show() { ns systemctl show -p ActiveState -p SubState -p NRestarts -p Result "$1" | tr '\n' ' '; }
# a check is one shell condition, compound ones included (`ok '[ "$rc" = 0 ] && grep -q X F'`): it is evaluated whole
ok() { if eval "$1"; then echo true; else echo false; fi; }

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
