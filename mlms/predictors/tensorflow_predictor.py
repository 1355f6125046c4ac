"""TensorFlow predictor: a Keras model (``.keras``) called inside one ``tf.function``.

The function is traced once for a batch axis of any size, so every predict runs the same graph.
Layer profiling starts TensorFlow's profiler for the stretch and reads its XPlane file with
TensorFlow's own protobufs: on the host plane, each executed graph node is an event named
"<node name>:<op type>", and each predict call is wrapped in a ``Trace`` named ``mlms::predict``
whose start is matched to the host clock taken at the call (the anchor) to map the profiler's
clock onto the host clock. A node's layer is the innermost Keras layer of its name scope, named
by its path through nested layers (a KerasHub backbone's blocks and their sublayers).

``--compile`` (mode ``xla``) compiles the function with XLA (``jit_compile``): the graph becomes
fused XLA clusters, so no layer is left to trace, and only the model level runs compiled.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlms.assets.keras_models import import_tensorflow
from mlms.errors import UnsupportedFramework
from mlms.predictors.alignment import framework_events
from mlms.predictors.base import LayerCapture, PredictAnchor, Predictor, anchor
from mlms.tracer.layer_kinds import normalise_kind

MARK = "mlms::predict"
#: Graph nodes that move no data through the model (variable reads, arguments, control).
BOOKKEEPING = frozenset({"ReadVariableOp", "Identity", "NoOp", "Const", "_Arg", "_Retval"})
#: Op kinds that say less than the kind of the layer the op belongs to.
GENERIC_KINDS = frozenset({"add", "mul", "reshape", "activation", "other"})
_CALL_SUFFIX = re.compile(r"_\d+$")  # Keras names a layer's call scope "<layer>_1"


class TensorFlowPredictor(Predictor):
    framework = "tensorflow"
    compile_modes = ("xla",)
    layers_when_compiled = False

    def __init__(self, manifest, asset_path, options):
        super().__init__(manifest, asset_path, options)
        self.require_precision(("fp32",))
        tf = import_tensorflow()
        import keras

        self._tf = tf
        # Settable only before TensorFlow's runtime starts; later calls keep what is in force.
        with contextlib.suppress(RuntimeError):
            if options.intra_op_threads:
                tf.config.threading.set_intra_op_parallelism_threads(options.intra_op_threads)
            if options.inter_op_threads:
                tf.config.threading.set_inter_op_parallelism_threads(options.inter_op_threads)
        self.device = _tf_device(tf, options.device)
        source = manifest.file_source
        saved_model = source is not None and source.format == "saved_model"
        with tf.device(self.device):
            if saved_model:
                self.model = _serving_function(tf, asset_path, manifest.inputs[0].name)
            else:
                self.model = keras.models.load_model(asset_path, compile=False)
        spec = manifest.inputs[0]
        model = self.model
        # Token ids come at the length --seq-len asks for; the manifest's is only the default.
        shape = [None] * len(spec.shape) if spec.layout == "tokens" else list(spec.shape)
        self._function = tf.function(
            model if saved_model else lambda batch: model(batch, training=False),
            input_signature=[tf.TensorSpec([None, *shape], spec.dtype)],
            jit_compile=options.compile == "xla",
        )
        # A SavedModel holds no Keras layers: its layers are its graph's nodes.
        self._layers = {} if saved_model else _sublayers(model)
        self._anchors: list[PredictAnchor] | None = None

    @classmethod
    def framework_version(cls) -> str:
        return import_tensorflow().__version__

    def settings(self) -> dict[str, Any]:
        threading = self._tf.config.threading
        return {
            "device": self.options.device,
            "tf_device": self.device,
            "intra_op_threads": threading.get_intra_op_parallelism_threads() or "default",
            "inter_op_threads": threading.get_inter_op_parallelism_threads() or "default",
            "dtype": "float32",
            "mode": "tf.function + XLA (jit_compile), Keras inference"
            if self.options.compile == "xla"
            else "tf.function, Keras inference",
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        }

    def predict(self, batch: np.ndarray) -> np.ndarray:
        tf = self._tf
        with tf.device(self.device):
            if self._anchors is None:
                return self._function(batch).numpy()
            self._anchors.append(anchor())
            with tf.profiler.experimental.Trace(MARK):
                return self._function(batch).numpy()

    def close(self) -> None:
        self.model = self._function = None

    def _layer_events(self) -> Iterator[LayerCapture]:
        tf = self._tf
        capture = LayerCapture()
        with tempfile.TemporaryDirectory() as logdir:
            options = tf.profiler.experimental.ProfilerOptions(
                host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
            )
            self._anchors = []
            tf.profiler.experimental.start(logdir, options=options)
            try:
                yield capture
            finally:
                tf.profiler.experimental.stop()
                anchors, self._anchors = self._anchors, None
            files = sorted(
                glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
            )
            if not files:
                raise RuntimeError(f"the TensorFlow profiler wrote no XPlane file under {logdir}")
            marks, nodes = read_host_events(Path(files[-1]))
        # A node's layer slot is its place in the order nodes first ran, the same in every
        # predict: independent ops run side by side on the inter-op threads and finish in a
        # different order each time, so counting by start time would shuffle the slots.
        slots: dict[str, int] = {}
        capture.events = framework_events(
            marks,
            anchors,
            nodes,
            lambda window: (
                (node, slots.setdefault(node.name, len(slots)), *self._described(node))
                for node in window
            ),
            profiler="the TensorFlow profiler",
            marks_are="predict traces",
        )

    def _described(self, node: HostEvent) -> tuple[str, str, dict[str, Any]]:
        """(layer, kind, attributes) of an executed graph node."""
        node_name, _, op_type = node.name.rpartition(":")
        layer, layer_class, scopes = self._layer_of(node_name)
        kind = normalise_kind(op_type)
        if kind in GENERIC_KINDS:
            # Elementwise and shape ops serve what holds them: Keras's inference
            # BatchNormalization is Mul/AddV2/Rsqrt, a Conv2D's bias a BiasAdd, a Flatten's size
            # a StridedSlice, a Dense's tanh-approximated GELU Mul/Pow/Tanh in a "Gelu" scope.
            # A fused op (conv+relu) keeps its op's kind even when named after the relu.
            for name in (*reversed(scopes), layer_class):
                if normalise_kind(name) not in GENERIC_KINDS:
                    kind = normalise_kind(name)
                    break
        return layer, kind, {"op_type": op_type, "node": node_name, "tf_thread": node.line}

    def _layer_of(self, node_name: str) -> tuple[str, str, list[str]]:
        """(layer, its class, the name scopes below it) of a node: the innermost Keras layer
        whose name scope holds it, as its path ("model_1/conv1_1/Conv2D" -> "conv1";
        "m_1/bert_backbone_1/transformer_layer_0_1/.../Gelu/Tanh" ->
        "bert_backbone/transformer_layer_0/..."); a node outside any layer keeps its name."""
        scopes = node_name.split("/")[1:-1]
        path: list[str] = []
        layer_class = ""
        children = self._layers
        for scope in scopes:
            name = next((c for c in (scope, _CALL_SUFFIX.sub("", scope)) if c in children), None)
            if name is None:
                break
            path.append(name)
            layer_class, children = children[name]
        if not path:
            return node_name, "", []
        return "/".join(path), layer_class, scopes[len(path) :]


def _serving_function(tf: Any, path: Any, input_name: str) -> Any:
    """A SavedModel's ``serving_default`` signature as a function of its one input, returning
    its first output (by name)."""
    loaded = tf.saved_model.load(str(path))
    signature = loaded.signatures["serving_default"]
    output = sorted(signature.structured_outputs)[0]

    def serve(batch: Any) -> Any:
        return signature(**{input_name: batch})[output]

    serve.keep_alive = loaded  # the signature's variables live as long as the object
    return serve


def _sublayers(layer: Any) -> dict[str, tuple[str, dict]]:
    """Layer name -> (class name, its own sublayers), for the layers ``layer`` holds."""
    return {
        child.name: (type(child).__name__, _sublayers(child))
        for child in layer._flatten_layers(include_self=False, recursive=False)
    }


@dataclass(frozen=True)
class HostEvent:
    name: str
    start_ns: int  # the profiler's clock
    end_ns: int
    line: str


def read_host_events(path: Path) -> tuple[list[HostEvent], list[HostEvent]]:
    """(predict marks, executed graph nodes) on the host plane of an XPlane file, by start."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    marks: list[HostEvent] = []
    nodes: list[HostEvent] = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        metadata = plane.event_metadata
        for line in plane.lines:
            for event in line.events:
                meta = metadata[event.metadata_id]
                start = line.timestamp_ns + event.offset_ps // 1000
                host_event = HostEvent(
                    meta.name, start, start + event.duration_ps // 1000, line.display_name
                )
                if meta.name == MARK:
                    marks.append(host_event)
                elif meta.display_name and meta.display_name not in BOOKKEEPING:
                    # Executed graph nodes carry their op type as the display name.
                    nodes.append(host_event)
    marks.sort(key=lambda e: e.start_ns)
    nodes.sort(key=lambda e: e.start_ns)
    return marks, nodes


def _tf_device(tf: Any, device: str) -> str:
    if not device.startswith("cuda"):
        return "/CPU:0"
    index = int(device.partition(":")[2] or 0)
    gpus = tf.config.list_physical_devices("GPU")
    if index >= len(gpus):
        raise UnsupportedFramework(
            f"device {device!r} asked for, but this TensorFlow sees {len(gpus)} GPU(s) "
            "(tensorflow-cpu has none; install the tensorflow[and-cuda] build for GPUs)"
        )
    return f"/GPU:{index}"
