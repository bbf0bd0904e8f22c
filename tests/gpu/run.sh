#!/usr/bin/env bash
# The modules against real CUDA contexts, on a GPU host (run by hand, not by CI):
#   tests/gpu/run.sh OUTDIR
# Starts, detached as operators do, the SGLang double in real-GPU mode (each scheduler creates a CUDA
# context and holds SGLANG_DOUBLE_CUDA_GIB GiB; an untitled orphan that escapes the process group
# holds more), a decoy named nvidia-persistenced holding /dev/nvidiactl, then runs validate.yml
# with ansible-playbook -c local and writes the results (JSON) to OUTDIR.
# Without nvidia-smi it rehearses the same steps on the CPU, with regular files as device nodes.
# Needs ansible-core importable (PYTHONPATH) and ansible-playbook on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run.sh OUTDIR}
mkdir -p "$out"
work=$(mktemp -d)
py=${PYTHON:-python3}
export LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1

mkdir -p "$work/collections/ansible_collections/inferops"
ln -s "$root" "$work/collections/ansible_collections/inferops/sglang"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_LOCALHOST_WARNING=0

if command -v nvidia-smi >/dev/null; then
  mode=gpu; gib=${CUDA_GIB:-20}; orphan_gib=${ORPHAN_GIB:-4}
  devices='["/dev/nvidia*", "/dev/nvidia-caps/*"]'; ctl=/dev/nvidiactl; held=""
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv > "$out/nvidia-smi-before.csv"
  baseline=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s+=$1} END {print s}')
else
  mode=cpu; gib=0; orphan_gib=0
  mkdir -p "$work/dev/nvidia-caps"; touch "$work"/dev/{nvidia0,nvidiactl,nvidia-uvm} "$work"/dev/nvidia-caps/nvidia-cap1
  devices="[\"$work/dev/nvidia*\", \"$work/dev/nvidia-caps/*\"]"; ctl=$work/dev/nvidiactl
  held="$work/dev/nvidia* $work/dev/nvidia-caps/*"; baseline=0
fi
echo "mode=$mode baseline_mib=$baseline" | tee "$out/mode.txt"

# The decoy: a real executable named nvidia-persistenced holding the control node.
mkdir -p "$work/bin" && cp /bin/sleep "$work/bin/nvidia-persistenced"
setsid bash -c "exec 3<$ctl $work/bin/nvidia-persistenced 100000" < /dev/null > /dev/null 2>&1 &
decoy=$!

# The server, started as the seeds did.
t0=$(date +%s.%N)
model=/models/gpu-validation-$$
SGLANG_DOUBLE_CUDA_GIB=$gib SGLANG_DOUBLE_ORPHAN_CUDA_GIB=$orphan_gib SGLANG_DOUBLE_FAULTS=untitled_orphan \
SGLANG_DOUBLE_LOAD_SECONDS=1 SGLANG_DOUBLE_DEVICES="$held" PYTHONPATH="$root/tests/sglang_double:${PYTHONPATH:-}" \
  setsid nohup "$py" -m sglang.launch_server --model-path "$model" --tp 1 --port 30000 \
  > "$out/sglang.log" 2>&1 < /dev/null &

rc=0
ansible-playbook -c local -i localhost, "$root/tests/gpu/validate.yml" \
  -e "ansible_python_interpreter=$(command -v "$py")" -e "baseline_mib=$baseline" -e "{\"devices\": $devices}" \
  -e "outdir=$out" -e "model_path=$model" > "$out/ansible.log" 2>&1 || rc=$?
t1=$(date +%s.%N)
echo "playbook wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s (server start included), rc=$rc" >> "$out/mode.txt"
tail -n 25 "$out/ansible.log"
[ "$mode" = gpu ] && nvidia-smi --query-gpu=index,memory.used --format=csv > "$out/nvidia-smi-after.csv"
if kill -0 "$decoy" 2>/dev/null; then echo "decoy alive" >> "$out/mode.txt"; else echo "decoy DEAD" >> "$out/mode.txt"; rc=1; fi
kill "$decoy" 2>/dev/null || true
python3 "$root/tests/gpu/summarise.py" "$out" | tee "$out/summary.md"
exit $rc
