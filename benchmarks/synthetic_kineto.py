"""A synthetic Kineto (PyTorch profiler) trace shaped like a real GPU inference trace.

Why: HTA and mlms's importer are compared on traces of a million kernels, and no GPU here
records one. The layout follows a real trace of torchvision's resnet18 on an H100
(``torch.profiler`` with CUDA activities, exported by ``export_chrome_trace``): ProfilerStep
annotations, nested aten ops, one ``cudaLaunchKernel`` per kernel, kernels on stream 7 with
Kineto's args, ``ac2g`` flow events, metadata events, ``deviceProperties`` and a
``distributedInfo`` rank (HTA wants one), timestamps in microseconds with three decimals.

    .venv/bin/python benchmarks/synthetic_kineto.py OUT.json[.gz] --kernels 300000
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import TextIO

PID = 436
STREAM = 7
BASE_TS_US = 4_665_285_909_817.896

#: Real kernel names (resnet18 on an H100) with a typical duration in microseconds.
KERNELS: dict[str, tuple[str, float]] = {
    "to_nhwc": (
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
        "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
        "float const*, float*)",
        6.0,
    ),
    "fprop": (
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        40.0,
    ),
    "fprop_large": (
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        75.0,
    ),
    "to_nchw": (
        "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, "
        "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, "
        "float const*, float*)",
        8.0,
    ),
    "bn": (
        "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float, "
        "cudnnTensorStruct, float const*, cudnnTensorStruct, float*, cudnnTensorStruct, "
        "float const*, float const*, float const*, float const*, float)",
        12.0,
    ),
    "relu": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
        "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#14}::"
        "operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
        "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
        "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
        "const::{lambda()#14}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
        5.0,
    ),
    "add": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul>)",
        7.0,
    ),
    "gemm": (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<float const, float const, "
        "float>)",
        9.0,
    ),
}

#: One layer: (op chain from the top-level op down to the one that launches, kernels, shape).
LAYERS: tuple[tuple[tuple[str, ...], tuple[str, ...], list[list[int]]], ...] = (
    (
        ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"),
        ("to_nhwc", "to_nhwc", "fprop", "to_nchw"),
        [[8, 64, 56, 56], [64, 64, 3, 3], []],
    ),
    (
        ("aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"),
        ("bn",),
        [[8, 64, 56, 56], [64], [64], [64], [64], [], [], [], []],
    ),
    (("aten::relu_", "aten::clamp_min_"), ("relu",), [[8, 64, 56, 56]]),
    (
        ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"),
        ("to_nhwc", "fprop_large", "to_nchw"),
        [[8, 64, 56, 56], [128, 64, 3, 3], []],
    ),
    (
        ("aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"),
        ("bn",),
        [[8, 128, 28, 28], [128], [128], [128], [128], [], [], [], []],
    ),
    (("aten::add_",), ("add",), [[8, 128, 28, 28], [8, 128, 28, 28], []]),
    (("aten::relu_", "aten::clamp_min_"), ("relu",), [[8, 128, 28, 28]]),
    (("aten::linear", "aten::addmm"), ("gemm",), [[8, 512], [1000, 512], [1000]]),
)
KERNELS_PER_STEP = 1000


def write_synthetic(path: Path, kernels: int, *, seed: int = 0) -> None:
    """Write a trace with ``kernels`` kernels, one launch call each, in steps of about
    ``KERNELS_PER_STEP`` kernels (gzip when the name ends in .gz)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write(_header())
        _Writer(out, random.Random(seed)).steps(kernels)
        out.write(f'\n  ],\n  "traceName": "{path.name}"\n}}\n')


def _header() -> str:
    device = {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85017493504,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
    }
    distributed = {"backend": "nccl", "rank": 0, "world_size": 1}
    return (
        "{\n"
        '  "schemaVersion": 1,\n'
        f'  "deviceProperties": [{json.dumps(device)}],\n'
        f'  "distributedInfo": {json.dumps(distributed)},\n'
        '  "cuda_runtime_version": 13000,\n'
        '  "displayTimeUnit": "ms",\n'
        '  "baseTimeNanoseconds": 1790857026000000000,\n'
        '  "traceEvents": [\n'
        f'  {{"ph": "M", "name": "process_name", "ts": {BASE_TS_US:.3f}, "pid": {PID}, '
        '"tid": 0, "args": {"name": "python"}},\n'
        f'  {{"ph": "M", "name": "process_name", "ts": {BASE_TS_US:.3f}, "pid": 0, "tid": 0, '
        '"args": {"name": "python"}},\n'
        f'  {{"ph": "M", "name": "thread_name", "ts": {BASE_TS_US:.3f}, "pid": 0, '
        f'"tid": {STREAM}, "args": {{"name": "stream {STREAM}"}}}}'
    )


class _Writer:
    """Appends events in Kineto's own layout; CPU time runs ahead of the GPU's queue."""

    def __init__(self, out: TextIO, rng: random.Random) -> None:
        self.out = out
        self.rng = rng
        self.cpu = BASE_TS_US + 100.0
        self.gpu = self.cpu
        self.external = 0
        self.correlation = 1000
        self.chunk: list[str] = []

    def steps(self, kernels: int) -> None:
        step, layer = 0, 0
        while kernels > 0:
            start, self.cpu = self.cpu, self.cpu + 5.0
            marker = len(self.chunk)
            launched = 0
            while launched < min(KERNELS_PER_STEP, kernels):
                launched += self.layer(LAYERS[layer % len(LAYERS)], kernels - launched)
                layer += 1
            self.runtime(
                "cudaDeviceSynchronize", max(self.gpu - self.cpu, 0.0) + 2.0, launches=False
            )
            self.chunk.insert(
                marker,
                self.x(
                    "user_annotation",
                    f"ProfilerStep#{step}",
                    PID,
                    PID,
                    start,
                    self.cpu - start,
                    self.ext_args(),
                ),
            )
            self.cpu += 20.0
            kernels -= launched
            step += 1
            if len(self.chunk) > 20_000:
                self.flush()
        self.flush()

    def layer(self, layer: tuple, budget: int) -> int:
        """One top-level op with its nested ops; the innermost launches the kernels."""
        ops, keys, dims = layer
        keys = keys[:budget]
        starts, slots = [], []
        for _ in ops:
            starts.append(self.cpu)
            slots.append(len(self.chunk))
            self.chunk.append("")  # the op's event, written once its end is known
            self.cpu += 3.0 + self.rng.random()
        for key in keys:
            self.runtime("cudaLaunchKernel", 4.0 + self.rng.random() * 4, launches=True, key=key)
            self.cpu += 1.0
        for depth in range(len(ops) - 1, -1, -1):
            self.cpu += 1.0 + self.rng.random()
            args = self.ext_args() | {"Input Dims": dims, "Record function id": 0}
            duration = self.cpu - starts[depth]
            self.chunk[slots[depth]] = self.x(
                "cpu_op", ops[depth], PID, PID, starts[depth], duration, args
            )
        return len(keys)

    def runtime(self, name: str, dur: float, *, launches: bool, key: str = "") -> None:
        self.correlation += 1
        correlation = self.correlation
        start = self.cpu
        args = {"External id": self.external, "cbid": 211, "correlation": correlation}
        self.chunk.append(self.x("cuda_runtime", name, PID, PID, start, dur, args))
        self.cpu += dur
        if not launches:
            return
        name, typical = KERNELS[key]
        self.gpu = max(self.gpu, start + dur + 2.0) + 0.5 + self.rng.random()
        kernel_dur = typical * (0.7 + 0.6 * self.rng.random())
        kernel_args = {
            "External id": self.external,
            "queued": 0,
            "device": 0,
            "context": 1,
            "stream": STREAM,
            "correlation": correlation,
            "registers per thread": 32,
            "shared memory": 4224,
            "grid": [1568, 1, 8],
            "block": [256, 1, 1],
            "est. achieved occupancy %": 100,
        }
        self.chunk.append(self.x("kernel", name, 0, STREAM, self.gpu, kernel_dur, kernel_args))
        self.chunk.append(self.flow("s", correlation, PID, PID, start))
        self.chunk.append(self.flow("f", correlation, 0, STREAM, self.gpu))
        self.gpu += kernel_dur

    def ext_args(self) -> dict:
        self.external += 1
        return {"External id": self.external}

    @staticmethod
    def x(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> str:
        return (
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, '
            f'"tid": {tid},\n    "ts": {ts:.3f}, "dur": {dur:.3f},\n'
            f'    "args": {{\n      {json.dumps(args)[1:-1]}\n    }}\n  }}'
        )

    @staticmethod
    def flow(ph: str, correlation: int, pid: int, tid: int, ts: float) -> str:
        end = ', "bp": "e"' if ph == "f" else ""
        return (
            f'  {{\n    "ph": "{ph}", "id": {correlation}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {ts:.3f},\n    "cat": "ac2g", "name": "ac2g"{end}\n  }}'
        )

    def flush(self) -> None:
        if self.chunk:
            self.out.write(",\n" + ",\n".join(self.chunk))
            self.chunk = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--kernels", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_synthetic(args.output, args.kernels, seed=args.seed)


if __name__ == "__main__":
    main()
