#!/usr/bin/env bash
# The modules on a GPU host shared by two servers, an unrelated job and the NVIDIA daemon (run by hand on a
# GPU machine; tests/unit/test_gpu_run.py rehearses it on the CPU):
#   tests/gpu/run.sh OUTDIR
# 1. A venv for the servers, as an SGLang install is: its own site-packages, the interpreter's packages
#    (torch, setproctitle) and the SGLang double through .pth files. The nccl_env role (profile pcie, plus
#    NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV) goes into it, and nccl_probe.py, started with a bare
#    environment (env -i: PATH and the NVLink-multicast-off variables only), builds a real NCCL
#    communicator in spawned children.
# 2. Started detached, as operators do, from that venv with the same bare environment: server B (port 30001,
#    CUDA_GIB_B GiB), then server A (port 30000, a scheduler of CUDA_GIB GiB and an untitled
#    orphan of ORPHAN_GIB GiB that escapes the process group); in real-GPU mode each scheduler builds a real
#    NCCL communicator (world size --tp); an unrelated torch job holding TORCH_GIB GiB; a decoy named
#    nvidia-persistenced holding /dev/nvidiactl. Then validate.yml with ansible-playbook -c local.
# 3. The role again with nccl_env_state=absent, and the probe again (NCCL_DEBUG given in its environment).
# Results (JSON, logs, summary.md) go to OUTDIR; PORT_A, PORT_B and LOAD_TIMEOUT (s) change the defaults.
# Without nvidia-smi it rehearses the same steps on the CPU, with regular files as device nodes and no CUDA. Needs ansible-core importable and ansible-playbook on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
py=${PYTHON:-python3}
port_a=${PORT_A:-30000} port_b=${PORT_B:-30001}
export LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1

mkdir -p "$work/collections/ansible_collections/inferops"
ln -s "$root" "$work/collections/ansible_collections/inferops/sglang"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_LOCALHOST_WARNING=0
playbook() { ansible-playbook -c local -i localhost, -e "ansible_python_interpreter=$(command -v "$py")" "$@"; }

if command -v nvidia-smi >/dev/null; then
  mode=gpu; gib_a=${CUDA_GIB:-20}; orphan_gib=${ORPHAN_GIB:-4}; gib_b=${CUDA_GIB_B:-10}; torch_gib=${TORCH_GIB:-6}
  devices='["/dev/nvidia*", "/dev/nvidia-caps/*"]'; ctl=/dev/nvidiactl; held=""; nccl=1
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv > "$out/nvidia-smi-before.csv"
  baseline=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s+=$1} END {print s}')
else
  mode=cpu; gib_a=0; orphan_gib=0; gib_b=0; torch_gib=0; nccl=0
  mkdir -p "$work/dev/nvidia-caps"; touch "$work"/dev/{nvidia0,nvidiactl,nvidia-uvm} "$work"/dev/nvidia-caps/nvidia-cap1
  devices="[\"$work/dev/nvidia*\", \"$work/dev/nvidia-caps/*\"]"; ctl=$work/dev/nvidiactl
  held="$work/dev/nvidia* $work/dev/nvidia-caps/*"; baseline=0
fi
echo "mode=$mode baseline_mib=$baseline" | tee "$out/mode.txt"

# Everything this run starts carries this variable, so that the end can stop exactly that.
mark=INFEROPS_GPU_RUN=$work
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  local p
  for p in /proc/[0-9]*; do
    if grep -qzx "$mark" "$p/environ" 2>/dev/null; then kill -9 "${p#/proc/}" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# The servers' venv.
"$py" -m venv --without-pip "$work/venv"
vpy=$work/venv/bin/python
site=$("$vpy" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$py" -c 'import os, sys, sysconfig as c; b = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
std = [c.get_paths(vars=b)[k] for k in ("stdlib", "platstdlib")]
print("\n".join(p for p in sys.path[1:] if os.path.isdir(p) and not any(p == s or p.startswith(s + "/") for s in std)))' \
  > "$site/base_packages.pth"
echo "$root/tests/sglang_double" > "$site/sglang_double.pth"
# A bare environment: PATH, the variables that keep NVLink multicast off (a shared host's rule), the marker.
bare=(env -i "PATH=$PATH" "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}" "TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}"
      "NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}" "$mark")

rc=0
nccl_step() {  # STATE [VAR=VALUE...]: the role, then the probe with the bare environment (and the variables given)
  local state=$1
  shift
  playbook "$root/tests/gpu/nccl.yml" -e "venv=$work/venv state=$state outdir=$out" > "$out/ansible-nccl-$state.log" 2>&1 || rc=1
  "${bare[@]}" "$@" "$vpy" "$root/tests/gpu/nccl_probe.py" > "$out/nccl-probe-$state.log" 2>&1 || rc=1
}
nccl_step present

# The decoy: a real executable named nvidia-persistenced holding the control node.
mkdir -p "$work/bin" && cp /bin/sleep "$work/bin/nvidia-persistenced"
"${bare[@]}" setsid bash -c "exec 3<$ctl $work/bin/nvidia-persistenced 100000" < /dev/null > /dev/null 2>&1 &
decoy=$!

server() {  # NAME PORT GIB ORPHAN_GIB FAULTS
  "${bare[@]}" SGLANG_DOUBLE_CUDA_GIB="$3" SGLANG_DOUBLE_ORPHAN_CUDA_GIB="$4" SGLANG_DOUBLE_FAULTS="$5" \
    SGLANG_DOUBLE_NCCL=$nccl SGLANG_DOUBLE_LOAD_SECONDS=1 SGLANG_DOUBLE_WATCHDOG_SECONDS=1 SGLANG_DOUBLE_DEVICES="$held" \
    setsid nohup "$vpy" -m sglang.launch_server --model-path "/models/gpu-validation-$1-$$" --tp 1 --port "$2" \
    > "$out/sglang-$1.log" 2>&1 < /dev/null &
}
t0=$(date +%s.%N)
# B first: A's orphan, started after both, is related to either server by its start time alone.
server b "$port_b" "$gib_b" 0 ""
sleep 1
server a "$port_a" "$gib_a" "$orphan_gib" untitled_orphan
"${bare[@]}" setsid "$py" "$root/tests/gpu/torch_job.py" "$torch_gib" ${held:+$work/dev/nvidia0 $work/dev/nvidiactl} \
  > "$out/torch-job.log" 2>&1 < /dev/null &
torch_job=$!

playbook "$root/tests/gpu/validate.yml" -e "baseline_mib=$baseline" -e "{\"devices\": $devices}" -e "outdir=$out" \
  -e "model_a=/models/gpu-validation-a-$$ model_b=/models/gpu-validation-b-$$ torch_pid=$torch_job" \
  -e "port_a=$port_a port_b=$port_b load_timeout=${LOAD_TIMEOUT:-600}" \
  > "$out/ansible.log" 2>&1 || rc=$?
t1=$(date +%s.%N)
echo "shared-host playbook wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s (server start included), rc=$rc" >> "$out/mode.txt"
tail -n 25 "$out/ansible.log"
[ "$mode" = gpu ] && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$out/nvidia-smi-apps-after.csv"
alive() {  # NAME PID
  if kill -0 "$2" 2>/dev/null; then echo "$1 alive"; else echo "$1 DEAD"; rc=1; fi >> "$out/mode.txt"
}
alive decoy "$decoy"
alive torch_job "$torch_job"

# NCCL's log asked for explicitly this time: it shows what NCCL reads once the .pth is gone.
nccl_step absent NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV
"$py" "$root/tests/gpu/summarise.py" "$out" "$mode" > "$out/summary.md" || rc=1
cat "$out/summary.md"
exit $rc
