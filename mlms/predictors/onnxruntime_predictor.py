"""ONNX Runtime predictor.

Layer profiling uses ONNX Runtime's own profiler, which needs a session created with profiling
on: ``profile_layers`` opens a second, profiled session and predict calls inside it go there, so
the model-level session never carries the profiler. Node events ("<node>_kernel_time") become
FRAMEWORK events; each "model_run" event is matched to the predict call that caused it to map
the profiler's clock onto the host clock. Layers are named by the module path torch.export
recorded in each node's ``pkg.torch.onnx.name_scopes``, so they read like the torch layers.
Each carries the profiler's shapes and sizes (``activation_bytes`` is its ``output_size``) and
the node's parameters and flops (``onnx_layer_costs``).

``--compile`` picks the graph optimisation level (default: all, as ONNX Runtime ships). The
precision is fp32; tf32 where the CUDA provider may use TF32 for its matrix products; or fp16:
the stored fp32 graph converted at load by ONNX Runtime's own converter
(``onnxruntime.transformers.float16``), inputs and outputs kept fp32 behind Cast nodes so the
pipeline feeds it unchanged. On the CPU ONNX Runtime runs the operators it has fp16 kernels for
in fp16 and puts casts to fp32 around the others (its InsertCastTransformer), so an fp16 run
there measures what that mix costs. bf16 has no such converter.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlms.errors import UnsupportedFramework
from mlms.predictors.alignment import per_predict
from mlms.predictors.base import LayerCapture, PredictAnchor, Predictor, anchor
from mlms.predictors.onnx_layer_costs import GraphCosts
from mlms.tracer.layer_kinds import normalise_kind
from mlms.tracer.levels import TraceLevel
from mlms.tracer.spans import TimedEvent

NODE_SUFFIX = "_kernel_time"
#: --compile -> ONNX Runtime's graph optimisation level.
LEVELS = {
    "all": "ORT_ENABLE_ALL",
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disable": "ORT_DISABLE_ALL",
}


class OnnxRuntimePredictor(Predictor):
    framework = "onnxruntime"
    compile_modes = tuple(LEVELS)

    @classmethod
    def precisions(cls, capability: tuple[int, int] | None) -> tuple[str, ...]:
        """fp16: the graph converted at load; tf32 through the CUDA provider's switch."""
        return ("fp32", "fp16") if capability is None else ("fp32", "tf32", "fp16")

    def __init__(self, manifest, asset_path, options):
        super().__init__(manifest, asset_path, options)
        import onnxruntime as ort

        self._ort = ort
        if options.device.startswith("cuda"):
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UnsupportedFramework(
                    f"device {options.device!r} asked for, but this onnxruntime has no CUDA "
                    f"provider (it has: {', '.join(ort.get_available_providers())})"
                )
            index = int(options.device.partition(":")[2] or 0)
            tf32 = int(options.precision == "tf32")
            self.providers: list[Any] = [
                ("CUDAExecutionProvider", {"device_id": index, "use_tf32": tf32})
            ]
            # The precisions the provider takes do not depend on the GPU's generation.
            capability: tuple[int, int] | None = (8, 0)
        else:
            self.providers = ["CPUExecutionProvider"]
            capability = None
        self.require_precision(self.precisions(capability))
        self.level = LEVELS[options.compile or "all"]
        import onnx

        self._model: str | bytes = str(asset_path)
        if options.precision == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16

            half = convert_float_to_float16(onnx.load(str(asset_path)), keep_io_types=True)
            self._model = half.SerializeToString()
            graph = half.graph
        else:
            graph = onnx.load(str(asset_path), load_external_data=False).graph
        self._layer_names = _layer_names(graph)
        self._graph = GraphCosts(graph)
        self.session = self._session(profile_dir=None)
        self.input_name = self.session.get_inputs()[0].name
        self._profiled: Any = None
        self._anchors: list[PredictAnchor] = []

    @classmethod
    def framework_version(cls) -> str:
        import onnxruntime

        return onnxruntime.__version__

    def _session(self, profile_dir: str | None) -> Any:
        ort = self._ort
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self.level)
        if self.options.intra_op_threads:
            options.intra_op_num_threads = self.options.intra_op_threads
        if self.options.inter_op_threads:
            options.inter_op_num_threads = self.options.inter_op_threads
        if profile_dir is not None:
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(profile_dir, "ort")
        return ort.InferenceSession(self._model, options, providers=self.providers)

    def settings(self) -> dict[str, Any]:
        options = self.session.get_session_options()
        return {
            "device": self.options.device,
            "providers": self.session.get_providers(),
            "intra_op_threads": options.intra_op_num_threads or "default",
            "inter_op_threads": options.inter_op_num_threads or "default",
            "graph_optimization": self.level,
            "precision": self.options.precision,
            "dtype": "float16" if self.options.precision == "fp16" else "float32",
        }

    def predict(self, batch: np.ndarray) -> np.ndarray:
        if self._profiled is None:
            return self.session.run(None, {self.input_name: batch})[0]
        self._anchors.append(anchor())
        return self._profiled.run(None, {self.input_name: batch})[0]

    def close(self) -> None:
        self.session = None

    def _layer_events(self) -> Iterator[LayerCapture]:
        capture = LayerCapture()
        with tempfile.TemporaryDirectory() as folder:
            self._profiled, self._anchors = self._session(profile_dir=folder), []
            try:
                yield capture
            finally:
                profile = Path(self._profiled.end_profiling())
                self._profiled, anchors = None, self._anchors
            events = json.loads(profile.read_text())
        capture.events = list(self._convert(events, anchors))

    def _convert(self, events: list[dict], anchors: list[PredictAnchor]) -> Iterator[TimedEvent]:
        windows = per_predict(
            (e for e in events if e.get("name") == "model_run"),
            anchors,
            lambda run: (run["ts"] * 1000, (run["ts"] + run["dur"]) * 1000),
            (e for e in events if e.get("cat") == "Node" and e["name"].endswith(NODE_SUFFIX)),
            lambda node: node["ts"] * 1000,
            profiler="onnxruntime",
            marks_are="model_run events",
        )
        for window in windows:
            for index, node in enumerate(window.events):
                yield self._timed(node, index, window.offset_ns, window.anchor.thread)

    def _timed(self, node: dict, index: int, offset_ns: int, thread: int) -> TimedEvent:
        args = node.get("args", {})
        node_name = node["name"][: -len(NODE_SUFFIX)]
        op_type = args.get("op_name", "")
        attributes: dict[str, Any] = {
            "op_type": op_type,
            "node": node_name,
            "provider": args.get("provider", ""),
        }
        shapes = [next(iter(item.values())) for item in args.get("input_type_shape", [])]
        if shapes:
            attributes["input_shapes"] = shapes
        outputs = [next(iter(item.values())) for item in args.get("output_type_shape", [])]
        if outputs:
            attributes["output_shapes"] = outputs
        if "output_size" in args:
            attributes["activation_bytes"] = int(args["output_size"])
        for key in ("output_size", "parameter_size", "activation_size"):
            if key in args:
                attributes[key] = int(args[key])
        attributes |= self._graph.costs(node_name, op_type, shapes, outputs)
        start = node["ts"] * 1000 + offset_ns
        origin = self._graph.origin(node_name)
        return TimedEvent(
            name=self._layer_names.get(origin, node_name) if origin else node_name,
            kind=normalise_kind(op_type),
            level=TraceLevel.FRAMEWORK,
            start_ns=start,
            end_ns=start + node["dur"] * 1000,
            thread=thread,
            layer_index=index,
            attributes=attributes,
        )


def _layer_names(graph: Any) -> dict[str, str]:
    """ONNX node name -> "module.path/op" from torch.export's name scopes, where recorded.

    ONNX Runtime renames the nodes it fuses or rewrites; ``GraphCosts.origin`` leads back from
    such a name to the model's node."""
    names: dict[str, str] = {}
    for node in graph.node:
        scopes = next(
            (p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None
        )
        if not scopes:
            continue
        try:
            parts = [part for part in ast.literal_eval(scopes) if part]
        except (ValueError, SyntaxError):
            continue
        if parts:
            names[node.name] = f"{parts[-2]}/{node.op_type}" if len(parts) > 1 else parts[0]
    return names
