"""An unrelated job on the GPU host: holds GIB GiB of GPU memory with torch (real-GPU mode), or holds the
device files named after it open (the rehearsal on the CPU), until it is killed."""
import sys
import time

if __name__ == "__main__":
    gib = float(sys.argv[1])
    held = [open(p, "rb") for p in sys.argv[2:]]  # pylint: disable=consider-using-with
    if gib:
        import torch

        held.append(torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:0"))
    print("holding", flush=True)
    while True:
        time.sleep(3600)
