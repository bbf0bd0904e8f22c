#!/usr/bin/env bash
# On the GPU machine, from the repository's root: unpacks the parts a suite needs, makes the tiny model and runs
# the suite, writing its results under $OUT (tests/gpu/real/README.md):
#   bash tests/gpu/real/run.sh trace     the real 0.5.15 server's behaviour (parts: server)
#   bash tests/gpu/real/run.sh modules   the collection's modules against real servers (parts: server bench ansible)
#   bash tests/gpu/real/run.sh cutover   the cutover under systemd 252 in a pid+mount namespace (parts: server ansible systemd)
#   bash tests/gpu/real/run.sh heal      a unit that heals itself: liveness, busy, debris, caches (parts: server ansible systemd)
#   bash tests/gpu/real/run.sh weights   SGLang 0.5.17's weight cache daemon as a unit: restarts that keep the weights
#                                        (parts: server017 ansible systemd; WORK defaults to /var/lib/inferops-real/,
#                                        outside /tmp: the units run with PrivateTmp=yes)
# BUNDLE (default .cache/gpu-real, what `make gpu-bundle` wrote) holds the parts; WORK (default a new
# temporary folder) is where they are unpacked. Extra arguments go to the suite's script.
# The suites with a systemd namespace (cutover, heal, weights) start from a clean machine: what an earlier call left
# running (its namespace, setsid, outlives the call) is ended, what it installed removed, the GPUs' memory waited for
# (namespaces.py end; said in run.txt). INFEROPS_REAL_T0, this script's start, is where a suite's budget counts from.
set -euo pipefail
t0=$EPOCHREALTIME
export INFEROPS_REAL_T0=$t0
here=$(cd "$(dirname "$0")" && pwd)
root=$PWD
suite=${1:?usage: run.sh trace|modules|cutover|heal|weights [ARGS]}
shift
bundle=${BUNDLE:-$root/.cache/gpu-real}
out=${OUT:?OUT: the folder the results go to}
if [ "$suite" = weights ]; then
  work=${WORK:-$(mkdir -p /var/lib/inferops-real && mktemp -d /var/lib/inferops-real/work.XXXXXX)}
else
  work=${WORK:-$(mktemp -d /tmp/inferops-real.XXXXXX)}
fi
mkdir -p "$out" "$work"
case $suite in
  cutover|heal|weights) python3 "$here/namespaces.py" end --keep "$work" > "$work/earlier.txt" 2>&1 ||
                          echo "earlier run: namespaces.py end failed (rc $?)" >> "$work/earlier.txt" ;;
esac
case $suite in
  trace) parts=(server); [ ! -e "$bundle/systemd.tar" ] || parts+=(systemd) ;;  # the .debs: which libraries the GPU machine lacks
  modules) parts=(server bench ansible) ;;
  cutover|heal) parts=(server ansible systemd) ;;
  weights) parts=(server017 ansible systemd) ;;  # server017 is unpacked as server/: the suites' lib finds it there
  *) echo "run.sh: unknown suite $suite (trace, modules, cutover, heal, weights)" >&2; exit 2 ;;
esac
t_parts=$EPOCHREALTIME
unpack() {
  local part=$1
  if [ "$part" = systemd ]; then
    mkdir -p "$work/debs" && tar -x -C "$work/debs" -f "$bundle/systemd.tar"
  else
    local dir=${part%017}
    mkdir -p "$work/$dir" && xz -dc -T0 "$bundle/$part.tar.xz" | tar -x -C "$work/$dir"
  fi
}
pids=()
for p in "${parts[@]}"; do
  [ -e "$bundle/$p.tar.xz" ] || [ -e "$bundle/$p.tar" ] || { echo "run.sh: $bundle has no part $p (make gpu-bundle)" >&2; exit 2; }
  unpack "$p" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
t1=$EPOCHREALTIME

# the server part first on the path: its transformers 5.12.1 and tokenizers 0.22.2 shadow the machine's own
path=$work/server
for p in bench ansible; do [ -d "$work/$p" ] && path=$path:$work/$p; done
export PYTHONPATH=$path${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# one cache each for Triton and the JIT kernels (tvm-ffi): only the first server to run a kernel compiles it
export TRITON_CACHE_DIR=$work/triton TVM_FFI_CACHE_DIR=$work/tvm-ffi
# NVLink multicast stays off on a shared host, also for every program started with a bare environment
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
  NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
python3 "$here/make_model.py" "$work/models" > "$work/models.txt"  # the tiny ones (weights.sh makes its own)
t2=$EPOCHREALTIME
{ [ ! -e "$work/earlier.txt" ] || cat "$work/earlier.txt"
  awk -v s="$t0" -v a="$t_parts" -v b="$t1" -v c="$t2" -v w="$work" -v p="${parts[*]}" \
    'BEGIN { printf "parts %s unpacked in %.1f s, model made in %.1f s, in %s (%.1f s since the start)\n", p, b - a, c - b, w, c - s }'
} | tee "$out/run.txt"

rc=0
case $suite in
  trace) python3 "$here/trace.py" --models "$work/models" --work "$work/run" --out "$out" \
           --debs "$work/debs" "$@" || rc=$? ;;
  modules) python3 "$here/modules.py" --models "$work/models" --work "$work/run" --out "$out" --root "$root" "$@" || rc=$? ;;
  cutover) bash "$here/cutover.sh" "$work" "$out" "$@" || rc=$? ;;
  heal) bash "$here/heal.sh" "$work" "$out" "$@" || rc=$? ;;
  weights) bash "$here/weights.sh" "$work" "$out" "$@" || rc=$? ;;
esac
# a device call brings back few files: the results (*.json, run.txt) stay as they are, the rest goes into one archive
# (beside, never over, one the suite packed itself)
packed=$suite-logs.tar.xz
[ ! -e "$out/$packed" ] || packed=$suite-other-logs.tar.xz
(cd "$out" && find . -maxdepth 1 -type f ! -name '*.json' ! -name run.txt ! -name '*.tar.xz' -printf '%P\n' |
   sort > "$work/logs.list" && [ -s "$work/logs.list" ] && tar -cJf "$packed" -T "$work/logs.list" &&
   xargs rm -f < "$work/logs.list") || true
exit $rc
