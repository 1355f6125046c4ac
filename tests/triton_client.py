"""Calls an agent's Open Inference Protocol with Triton's own client, in a process of its own:
tritonclient's generated code registers the same protobuf names (``inference.*``) in the
default descriptor pool as mlms's, and one process can hold only one of them.

Usage: python tests/triton_client.py ADDRESS MODEL INPUT.npy OUTPUT.npy TRACEPARENT
Prints JSON: server and model metadata, Triton's model configuration and statistics (taken
after the infers), and the status of bad requests.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException


def _error(call) -> dict[str, str]:
    try:
        call()
    except InferenceServerException as exc:
        return {"status": str(exc.status()), "message": exc.message()}
    return {"status": "OK", "message": ""}


def main(address: str, model: str, input_path: str, output_path: str, traceparent: str) -> None:
    client = triton.InferenceServerClient(address)
    metadata = client.get_model_metadata(model, as_json=True)
    spec = metadata["inputs"][0]
    batch = np.load(input_path)
    infer_input = triton.InferInput(spec["name"], list(batch.shape), spec["datatype"])
    infer_input.set_data_from_numpy(batch)
    result = client.infer(model, [infer_input], headers={"traceparent": traceparent})
    np.save(output_path, result.as_numpy(metadata["outputs"][0]["name"]))
    wrong_type = triton.InferInput(spec["name"], list(batch.shape), "INT64")
    wrong_type.set_data_from_numpy(batch.astype(np.int64))
    wrong_shape = triton.InferInput(spec["name"], [1, 3, 8, 8], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 3, 8, 8), np.float32))
    report = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready(model),
        "server": client.get_server_metadata(as_json=True),
        "model": metadata,
        "unknown_model": _error(lambda: client.get_model_metadata("resnet5")),
        "wrong_datatype": _error(lambda: client.infer(model, [wrong_type])),
        "wrong_shape": _error(lambda: client.infer(model, [wrong_shape])),
        "config": client.get_model_config(model, as_json=True),
        "unknown_config": _error(lambda: client.get_model_config("resnet5")),
        "shared_memory": _error(client.get_system_shared_memory_status),
    }
    # Last: the statistics count the infers above, the failed ones too.
    report["statistics"] = client.get_inference_statistics(model, as_json=True)
    client.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
