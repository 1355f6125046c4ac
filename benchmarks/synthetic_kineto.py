"""Synthetic Kineto (PyTorch profiler) traces shaped like real GPU inference traces.

Why: HTA and mlms's importer are compared on traces of a million kernels, and no GPU here
records one. The layout follows a real trace of torchvision's resnet18 on an H100
(``torch.profiler`` with CUDA activities, exported by ``export_chrome_trace``): ProfilerStep
annotations, nested aten ops, one ``cudaLaunchKernel`` per kernel, kernels on stream 7 with
Kineto's args, ``ac2g`` flow events, metadata events, ``deviceProperties`` and a
``distributedInfo`` rank (HTA wants one), timestamps in microseconds with three decimals.

``write_ranks`` writes a folder of rank traces of a 2-GPU (or N-GPU) tensor-parallel decoder
instead, as torch.profiler records one per process: each layer's column- and row-parallel
linears, attention and elementwise kernels, and after each row-parallel linear an all-reduce
of the hidden state: ``c10d::allreduce_`` around ``record_param_comms`` (with Kineto's
"Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size" args) around the
``nccl:all_reduce`` annotation and its ``cudaLaunchKernelExC``, and the
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` kernel on NCCL's own stream (the same args copied
onto it, as newer Kineto does). Ranks run in lockstep: each all-reduce kernel starts when its
rank's GPU reaches it and ends when the last rank has arrived plus the transfer (NVLink-like
bandwidth), and the compute stream waits for it; rank r's host is a little slower than rank 0's
(r x 10 %), so the others wait for it in their collectives, as in a real run.

    .venv/bin/python benchmarks/synthetic_kineto.py OUT.json[.gz] --kernels 300000
    .venv/bin/python benchmarks/synthetic_kineto.py OUT_DIR --ranks 2 --kernels 100000
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from contextlib import ExitStack
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

#: A tensor-parallel decoder's kernels (bf16 on an H100), typical durations in microseconds.
KERNELS |= {
    "norm": (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
        "float*, float*, c10::BFloat16*)",
        6.0,
    ),
    "gemm_bf16": (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
        45.0,
    ),
    "flash": (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> "
        ">, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        38.0,
    ),
    "add_bf16": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul>)",
        5.0,
    ),
    "silu_bf16": (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::"
        "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, "
        "at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
        "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
        "std::array<char*, 2ul>)",
        7.0,
    ),
}
NCCL_ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_STREAM = 24
#: The hidden state all-reduced after each row-parallel linear: 512 tokens x 2048, bf16.
ALL_REDUCE_ELEMENTS = 512 * 2048
#: Bus bandwidth (bytes/us) and latency (us) of the simulated link.
LINK_BYTES_PER_US, LINK_LATENCY_US = 150e3, 8.0
_LINEAR = ("aten::linear", "aten::matmul", "aten::mm")
#: One decoder layer split over the ranks; ``None`` marks an all-reduce.
TP_LAYERS: tuple[tuple[tuple[str, ...], tuple[str, ...], list[list[int]]] | None, ...] = (
    (("aten::layer_norm", "aten::native_layer_norm"), ("norm",), [[1, 512, 2048], [2048]]),
    (_LINEAR, ("gemm_bf16",), [[512, 2048], [1536, 2048]]),
    (
        ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention"),
        ("flash",),
        [[1, 8, 512, 64], [1, 8, 512, 64], [1, 8, 512, 64]],
    ),
    (_LINEAR, ("gemm_bf16",), [[512, 1024], [2048, 1024]]),
    None,
    (("aten::add",), ("add_bf16",), [[1, 512, 2048], [1, 512, 2048]]),
    (("aten::layer_norm", "aten::native_layer_norm"), ("norm",), [[1, 512, 2048], [2048]]),
    (_LINEAR, ("gemm_bf16",), [[512, 2048], [2816, 2048]]),
    (("aten::silu",), ("silu_bf16",), [[1, 512, 2816]]),
    (_LINEAR, ("gemm_bf16",), [[512, 2816], [2048, 2816]]),
    None,
    (("aten::add",), ("add_bf16",), [[1, 512, 2048], [1, 512, 2048]]),
)


def write_synthetic(path: Path, kernels: int, *, seed: int = 0) -> None:
    """Write a trace with ``kernels`` kernels, one launch call each, in steps of about
    ``KERNELS_PER_STEP`` kernels (gzip when the name ends in .gz)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write(_header())
        _Writer(out, random.Random(seed)).steps(kernels)
        out.write(f'\n  ],\n  "traceName": "{path.name}"\n}}\n')


def write_ranks(
    folder: Path, ranks: int, kernels: int, *, seed: int = 0, compress: bool = False
) -> list[Path]:
    """Write one tensor-parallel trace per rank into ``folder`` (``rank-N.json``, or
    ``.json.gz``), each with about ``kernels`` kernels, NCCL's among them (module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rank-{r}.json{'.gz' if compress else ''}" for r in range(ranks)]
    opener = gzip.open if compress else open
    with ExitStack() as stack:
        writers = []
        for rank, path in enumerate(paths):
            out = stack.enter_context(opener(path, "wt", encoding="utf-8"))
            out.write(_header(rank, ranks))
            writers.append(_Writer(out, random.Random(seed * 1000 + rank), rank=rank))
        _lockstep(writers, kernels)
        for path, writer in zip(paths, writers, strict=True):
            writer.out.write(f'\n  ],\n  "traceName": "{path.name}"\n}}\n')
    return paths


def _lockstep(writers: list[_Writer], kernels: int) -> None:
    """Steps of decoder layers on every rank at once, meeting at each all-reduce."""
    step, position = 0, 0
    while kernels > 0:
        for writer in writers:
            writer.begin_step()
        launched = 0
        while launched < min(KERNELS_PER_STEP, kernels):
            layer = TP_LAYERS[position % len(TP_LAYERS)]
            position += 1
            if layer is None:
                arrivals = [writer.launch_all_reduce(len(writers)) for writer in writers]
                transfer = LINK_LATENCY_US + 2 * ALL_REDUCE_ELEMENTS / LINK_BYTES_PER_US
                done = max(arrivals) + transfer
                for writer, arrival in zip(writers, arrivals, strict=True):
                    writer.all_reduce_kernel(arrival, done, len(writers))
                launched += 1
            else:
                counts = {writer.layer(layer, kernels - launched) for writer in writers}
                launched += counts.pop()
        for writer in writers:
            writer.end_step(step)
        kernels -= launched
        step += 1
    for writer in writers:
        writer.flush()


def _header(rank: int = 0, world_size: int = 1) -> str:
    devices = [
        {
            "id": index,
            "name": "NVIDIA H100 80GB HBM3",
            "totalGlobalMem": 85017493504,
            "computeMajor": 9,
            "computeMinor": 0,
            "numSms": 132,
        }
        for index in range(world_size)
    ]
    distributed = {"backend": "nccl", "rank": rank, "world_size": world_size}
    if world_size > 1:
        distributed["pg_config"] = [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": world_size, "ranks": list(range(world_size))}
        ]  # fmt: skip
        distributed["nccl_version"] = "2.27.3"
    pid = PID + rank
    return (
        "{\n"
        '  "schemaVersion": 1,\n'
        f'  "deviceProperties": {json.dumps(devices)},\n'
        f'  "distributedInfo": {json.dumps(distributed)},\n'
        '  "cuda_runtime_version": 13000,\n'
        '  "displayTimeUnit": "ms",\n'
        '  "baseTimeNanoseconds": 1790857026000000000,\n'
        '  "traceEvents": [\n'
        f'  {{"ph": "M", "name": "process_name", "ts": {BASE_TS_US:.3f}, "pid": {pid}, '
        '"tid": 0, "args": {"name": "python"}},\n'
        f'  {{"ph": "M", "name": "process_name", "ts": {BASE_TS_US:.3f}, "pid": {rank}, '
        '"tid": 0, "args": {"name": "python"}},\n'
        f'  {{"ph": "M", "name": "thread_name", "ts": {BASE_TS_US:.3f}, "pid": {rank}, '
        f'"tid": {STREAM}, "args": {{"name": "stream {STREAM}"}}}}'
    )


class _Writer:
    """Appends events in Kineto's own layout; CPU time runs ahead of the GPU's queue."""

    def __init__(self, out: TextIO, rng: random.Random, rank: int = 0) -> None:
        self.out = out
        self.rng = rng
        self.rank = rank
        self.pid = PID + rank
        self.slowdown = 1.0 + 0.1 * rank  # rank r's host: r x 10 % slower
        self.cpu = BASE_TS_US + 100.0
        self.gpu = self.cpu
        self.external = 0
        self.correlation = 1000
        self.chunk: list[str] = []
        self._step_start = self.cpu
        self._step_marker = 0

    def steps(self, kernels: int) -> None:
        step, layer = 0, 0
        while kernels > 0:
            self.begin_step()
            launched = 0
            while launched < min(KERNELS_PER_STEP, kernels):
                launched += self.layer(LAYERS[layer % len(LAYERS)], kernels - launched)
                layer += 1
            self.end_step(step)
            kernels -= launched
            step += 1
        self.flush()

    def begin_step(self) -> None:
        self._step_start, self.cpu = self.cpu, self.cpu + 5.0
        self._step_marker = len(self.chunk)

    def end_step(self, step: int) -> None:
        """Synchronize, then the step's annotation (before its events, as Kineto writes it)."""
        self.runtime("cudaDeviceSynchronize", max(self.gpu - self.cpu, 0.0) + 2.0, launches=False)
        start = self._step_start
        self.chunk.insert(
            self._step_marker,
            self.x(
                "user_annotation",
                f"ProfilerStep#{step}",
                self.pid,
                self.pid,
                start,
                self.cpu - start,
                self.ext_args(),
            ),
        )
        self.cpu += 20.0
        if len(self.chunk) > 20_000:
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
            self.cpu += (3.0 + self.rng.random()) * self.slowdown
        for key in keys:
            self.runtime("cudaLaunchKernel", 4.0 + self.rng.random() * 4, launches=True, key=key)
            self.cpu += 1.0
        for depth in range(len(ops) - 1, -1, -1):
            self.cpu += 1.0 + self.rng.random()
            args = self.ext_args() | {"Input Dims": dims, "Record function id": 0}
            duration = self.cpu - starts[depth]
            self.chunk[slots[depth]] = self.x(
                "cpu_op", ops[depth], self.pid, self.pid, starts[depth], duration, args
            )
        return len(keys)

    def launch_all_reduce(self, ranks: int) -> float:
        """The host side of an all-reduce of the hidden state (c10d op, record_param_comms,
        NCCL's annotation, the launch); returns when the kernel can start on this GPU."""
        pid, start = self.pid, self.cpu
        c10d_args = self.ext_args() | {"Input Dims": [[1, 512, 2048]], "Record function id": 0}
        comms = self.comm_args(ranks)
        self.cpu += 2.0 * self.slowdown
        param_start, param_args = self.cpu, self.ext_args() | comms
        self.cpu += 3.0
        annotation_start, annotation_args = self.cpu, self.ext_args()
        self.cpu += 2.0
        launch_start = self.cpu
        self.correlation += 1
        self._launch = (self.correlation, self.external, launch_start)
        launch = {"External id": self.external, "cbid": 430, "correlation": self.correlation}
        self.cpu += 6.0 + self.rng.random()
        launch_end = self.cpu
        self.cpu += 2.0
        annotation_end = self.cpu
        self.cpu += 3.0
        param_end = self.cpu
        self.cpu += 5.0 * self.slowdown
        self.chunk += [
            self.x("cpu_op", "c10d::allreduce_", pid, pid, start, self.cpu - start, c10d_args),
            self.x("cpu_op", "record_param_comms", pid, pid, param_start,
                   param_end - param_start, param_args),
            self.x("user_annotation", "nccl:all_reduce", pid, pid, annotation_start,
                   annotation_end - annotation_start, annotation_args),
            self.x("cuda_runtime", "cudaLaunchKernelExC", pid, pid, launch_start,
                   launch_end - launch_start, launch),
        ]  # fmt: skip
        self.cpu += 1.0
        return max(self.gpu, launch_end + 2.0) + 0.5 + self.rng.random()

    def all_reduce_kernel(self, start: float, end: float, ranks: int) -> None:
        """The all-reduce's NCCL kernel, from this rank's arrival to the collective's end;
        the compute stream waits for it."""
        correlation, external, launched = self._launch
        args = {
            "External id": external,
            "queued": 0,
            "device": self.rank,
            "context": 1,
            "stream": NCCL_STREAM,
            "correlation": correlation,
            "registers per thread": 96,
            "shared memory": 87568,
            "grid": [16, 1, 1],
            "block": [544, 1, 1],
            "est. achieved occupancy %": 0,
        } | self.comm_args(ranks)
        self.chunk.append(
            self.x("kernel", NCCL_ALL_REDUCE, self.rank, NCCL_STREAM, start, end - start, args)
        )
        self.chunk.append(self.flow("s", correlation, self.pid, self.pid, launched))
        self.chunk.append(self.flow("f", correlation, self.rank, NCCL_STREAM, start))
        self.gpu = end

    @staticmethod
    def comm_args(ranks: int) -> dict:
        return {
            "Collective name": "allreduce",
            "dtype": "BFloat16",
            "In msg nelems": ALL_REDUCE_ELEMENTS,
            "Out msg nelems": ALL_REDUCE_ELEMENTS,
            "Group size": ranks,
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(ranks))),
        }

    def runtime(self, name: str, dur: float, *, launches: bool, key: str = "") -> None:
        self.correlation += 1
        correlation = self.correlation
        start = self.cpu
        pid = self.pid
        args = {"External id": self.external, "cbid": 211, "correlation": correlation}
        self.chunk.append(self.x("cuda_runtime", name, pid, pid, start, dur, args))
        self.cpu += dur
        if not launches:
            return
        name, typical = KERNELS[key]
        self.gpu = max(self.gpu, start + dur + 2.0) + 0.5 + self.rng.random()
        kernel_dur = typical * (0.7 + 0.6 * self.rng.random())
        kernel_args = {
            "External id": self.external,
            "queued": 0,
            "device": self.rank,
            "context": 1,
            "stream": STREAM,
            "correlation": correlation,
            "registers per thread": 32,
            "shared memory": 4224,
            "grid": [1568, 1, 8],
            "block": [256, 1, 1],
            "est. achieved occupancy %": 100,
        }
        device = self.rank
        self.chunk.append(self.x("kernel", name, device, STREAM, self.gpu, kernel_dur, kernel_args))
        self.chunk.append(self.flow("s", correlation, pid, pid, start))
        self.chunk.append(self.flow("f", correlation, device, STREAM, self.gpu))
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
    parser.add_argument("output", type=Path, help="a trace file, or a folder with --ranks")
    parser.add_argument("--kernels", type=int, default=100_000, help="kernels a rank")
    parser.add_argument("--ranks", type=int, help="write a folder of this many rank traces")
    parser.add_argument("--gzip", action="store_true", help="gzip the rank traces")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.ranks:
        write_ranks(args.output, args.ranks, args.kernels, seed=args.seed, compress=args.gzip)
    else:
        write_synthetic(args.output, args.kernels, seed=args.seed)


if __name__ == "__main__":
    main()
