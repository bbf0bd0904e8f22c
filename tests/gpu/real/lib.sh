# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034  # the variables below are the sourcing suite's, and what is set here is for it
# What the suites that run systemd 252 on the GPU machine share (cutover.sh, heal.sh): sourced, with these set first:
#   work (the unpacked parts: server/, ansible/, debs/, models/), out (the results), root (the checkout), py (python3),
#   results and times (the JSON files record and note write), t_suite ($EPOCHREALTIME at the suite's start).
# systemd runs as PID 1 of a new pid and mount namespace (systemd_boot); everything meant for it runs inside, through
# ns (nsenter). The servers run from a venv (WORK/venv, make_venv) that finds the bundle and the machine's torch through
# a .pth file, as an SGLang install does. Each namespace booted is recorded (namespaces.py record), so that the next
# run ends it if this one could not (run.sh: namespaces.py end, before a suite boots its own).
lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

record() {  # NAME OK DETAIL: one check into $results
  "$py" - "$results" "$1" "$2" "$3" <<'EOF'
import json, sys
path, name, ok, detail = sys.argv[1:]
r = json.load(open(path))
r[name] = {"ok": ok == "true", "detail": detail}
json.dump(r, open(path, "w"), indent=1, sort_keys=True)
EOF
  echo "$(awk -v a="$t_suite" -v b="$EPOCHREALTIME" 'BEGIN{printf "%6.1f", b-a}') $1: $2 $3"
}
note() {  # NAME VALUE: a value (JSON) into $times
  "$py" - "$times" "$1" "$2" <<'EOF'
import json, sys
path, name, value = sys.argv[1:]
r = json.load(open(path))
r[name] = json.loads(value)
json.dump(r, open(path, "w"), indent=1, sort_keys=True)
EOF
}
now() { awk -v a="$t_suite" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'; }  # EPOCH: seconds since it
fail_all() { record setup false "$1"; exit 1; }
# a check is one shell condition, compound ones included (`ok '[ "$rc" = 0 ] && grep -q X F'`): it is evaluated whole
ok() { if eval "$1"; then echo true; else echo false; fi; }

# --- systemd and dbus from the .debs --------------------------------------------------------------
systemd_install() {  # the programs into /, the libraries the machine lacks into WORK/deb-libs; units masked
  local libs=$work/deb-libs d missing u
  mkdir -p "$libs"
  for d in "$work"/debs/*.deb; do
    case $(basename "$d") in
      systemd_*|libsystemd-shared_*|dbus_*|dbus-bin_*|dbus-daemon_*|dbus-system-bus-common_*|dbus-session-bus-common_*)
        # into / through its links: `dpkg-deb -x` would replace a merged /usr's /lib and /bin links with folders
        dpkg-deb --fsys-tarfile "$d" | tar -x --keep-directory-symlink -C / ;;
      *) dpkg-deb --fsys-tarfile "$d" | tar -x --keep-directory-symlink -C "$libs" ;;  # searched after the machine's own
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
}
ns_pid=
systemd_boot() {  # LOG: systemd as PID 1 of a new pid+mount namespace (ns_pid: its pid here), running, with D-Bus
  local state='' starter
  setsid env -i container=other PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    unshare --fork --pid --mount-proc --mount --propagation private /bin/sh -c 'exec /lib/systemd/systemd --system' \
    > "$1" 2>&1 < /dev/null &
  starter=$!  # setsid, which (not a group leader in a script) execs env, which execs unshare: its pid is unshare's
  ns_pid=
  for _ in $(seq 100); do
    ns_pid=$(pgrep -x systemd -P "$starter" 2>/dev/null || pgrep -x systemd -P "$(pgrep -n -x unshare)" 2>/dev/null || true)
    [ -n "$ns_pid" ] && break
    sleep 0.1
  done
  [ -n "$ns_pid" ] || fail_all "systemd did not start: $(tail -5 "$1")"
  "$py" "$lib_dir/namespaces.py" record "$ns_pid" "$$" || true
  for _ in $(seq 120); do
    state=$(ns systemctl is-system-running 2>/dev/null || true)
    case $state in running|degraded) break ;; esac
    sleep 0.5
  done
  ns systemctl start dbus.socket dbus.service >/dev/null 2>&1 || true
  systemd_state=$state
}
systemd_poweroff() {  # [TIMEOUT]: powers the namespace's systemd off (its units stopped) and waits until it is gone
  local pid=$ns_pid p
  # what a suite entered into the namespace and left in the background (a watcher, through nsenter) first: stopped
  # (state T) there, it would hold systemd-shutdown's final wait for its 90-s timeout (seen on the GPU machine)
  for p in $(pgrep -f "^nsenter -t $pid " || true); do
    pkill -KILL -P "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  ns systemctl poweroff >/dev/null 2>&1 || kill "$pid"
  for _ in $(seq $(( ${1:-120} * 10 ))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}
systemd_end() {  # the namespace ended at once (SIGKILL of its PID 1: the kernel ends everything in it), waited for
  "$py" "$lib_dir/namespaces.py" kill "$ns_pid"
}
ns() { nsenter -t "$ns_pid" -m -p "$@"; }
watch_start() {  # PROGRAM [ARGS]: a watcher run with $py inside the namespace, in the background; watcher: its nsenter.
  # One command, never a function (`ns ... &` or `f &` forks a subshell: $! is the subshell, whose kill leaves the
  # python running and holding the suite's output open: the device call then waits for its limit); its output to a file
  nsenter -t "$ns_pid" -m -p "$py" "$@" > /dev/null 2>> "$out/watch.err" < /dev/null &
  watcher=$!
}
watch_stop() {  # the watcher: its python (a child of its nsenter) and the nsenter
  [ -z "${watcher:-}" ] || { pkill -TERM -P "$watcher"; kill "$watcher"; } 2>/dev/null
  watcher=
}

# --- the servers' venv, and what the playbooks run with -------------------------------------------
make_venv() {  # venv: WORK/venv; the collection linked under WORK/collections
  local site machine
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
}
server_env() {  # [NAME=VALUE...]: senv, the environment of an operator's shell that launches a server by hand: no
  # PYTHONPATH (the venv finds its packages), the venv's bin first on the machine's PATH (flashinfer's JIT runs ninja
  # from it), then these words, then SERVER_ENV's (e.g. the SGLang double's knobs for a rehearsal on a CPU)
  local extra=()
  read -r -a extra <<< "${SERVER_ENV:-}"
  senv=(env -i "PATH=$venv/bin:$PATH" LANG=C.UTF-8 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
        TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 "$@" "${extra[@]}")
}
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
playbook() {  # LOG INVENTORY PLAYBOOK [ARGS]: ansible-playbook inside the namespace; playbook_timeout (seconds, 0:
  # none) ends it (rc 124) so that a step cannot outrun a suite's budget
  local log=$1 inv=$2 pb=$3
  shift 3
  ns timeout -k 10 "${playbook_timeout:-0}" env -i "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root LANG=C.UTF-8 \
    "PYTHONPATH=$work/ansible" "ANSIBLE_COLLECTIONS_PATH=$work/collections" ANSIBLE_LOCALHOST_WARNING=0 \
    ANSIBLE_NOCOLOR=1 ANSIBLE_FORKS=1 "$py" -m ansible playbook -i "$inv" "$root/playbooks/$pb" "$@" > "$out/$log" 2>&1
}
# the model and the flags every hand launch takes (realserver.COMMON); a suite may set its own before launching
server_model=${server_model:-}
server_flags=(--tp 1 --attention-backend triton --sampling-backend pytorch --disable-cuda-graph
              --mem-fraction-static 0.3 --max-total-tokens 32768)
launch() {  # PORT NAME [ARGS]: a server started by hand inside the namespace, as operators do; its start noted
  local port=$1 name=$2
  shift 2
  note "launched_$name" "$(now)"
  ns "${senv[@]}" setsid nohup "$venv/bin/python" -m sglang.launch_server --model-path "${server_model:-$work/models/tiny}" \
    --host 127.0.0.1 --port "$port" "${server_flags[@]}" "$@" > "$work/$name.log" 2>&1 < /dev/null &
}
status_of() {  # PORT [PATH]: the status code of GET PATH (/health) (000: no answer)
  "$py" -c 'import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")' "$1" "${2:-/health}"
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
