"""What a fresh process pays before its first evaluation measures anything on a GPU, step by
step: the zoo sweep's cells each start one process, and the first evaluation of each spent
about 10 s more outside its evaluation span than the next ones on an H200.

Each repeat is a fresh interpreter that times, in order: importing torch, CUDA's start (the
first tensor on the device), NVML's start, the first cuBLAS matmul, the first cuDNN
convolution, and importing torchvision, timm and transformers (the zoo's libraries); the
table gives each step's seconds per repeat. The first repeat also reads the libraries from a
cold file cache where the machine has just started.

    python3 benchmarks/cuda_start.py [--repeats 3]        # on the GPU machine
    .venv/bin/python benchmarks/cuda_start.py --dry       # here: the CPU steps only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

#: Run in the child: each step's seconds, one JSON object on stdout.
CHILD = r"""
import json, sys, time
dry = sys.argv[1] == "dry"
steps = {}
def step(name, work):
    began = time.perf_counter()
    work()
    steps[name] = round(time.perf_counter() - began, 3)
step("import torch", lambda: __import__("torch"))
import torch
if not dry:
    step("CUDA start (first tensor)", lambda: torch.zeros(1, device="cuda"))
    def nvml():
        import pynvml
        pynvml.nvmlInit()
    step("NVML start", nvml)
    def matmul():
        a = torch.ones(64, 64, device="cuda")
        (a @ a).sum().item()
    step("first cuBLAS matmul", matmul)
    def conv():
        x = torch.ones(1, 3, 32, 32, device="cuda")
        torch.nn.functional.conv2d(x, torch.ones(8, 3, 3, 3, device="cuda")).sum().item()
    step("first cuDNN convolution", conv)
for library in ("torchvision", "timm", "transformers"):
    step(f"import {library}", lambda library=library: __import__(library))
print(json.dumps(steps))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dry", action="store_true", help="no GPU: the imports only")
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        child = [sys.executable, "-c", CHILD, "dry" if args.dry else "gpu"]
        done = subprocess.run(child, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"cuda_start: the child failed: {done.stderr.strip().splitlines()[-1]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| step | " + " | ".join(f"repeat {n + 1} (s)" for n in range(len(runs))) + " |")
    print("|---|" + "---:|" * len(runs))
    for name in runs[0]:
        print(f"| {name} | " + " | ".join(f"{run[name]:.3f}" for run in runs) + " |")
    totals = [sum(run.values()) for run in runs]
    print("| total | " + " | ".join(f"{total:.3f}" for total in totals) + " |")


if __name__ == "__main__":
    main()
