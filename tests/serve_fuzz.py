"""Mutated KServe v2 requests for `pyipu serve`: JSON documents with junk in random fields, and
valid HTTP and gRPC payloads with random bytes changed, cut off or inserted. Used by
tests/test_serve_robustness.py and benchmarks/serve_malformed.py."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np

# Field values that are wrong somewhere: types, signs, sizes, paths, control characters.
JUNK: list[Any] = [
    None,
    True,
    -1,
    0,
    1.5,
    1e308,
    "",
    "FP32",
    "X",
    [],
    [-1],
    [1 << 62],
    {},
    [[]],
    {"a": 1},
    "../..",
    [1, 2, 3],
    "\u0000",
    2**70,
]
MODELS = ["scale", "scale", "mlp", "multi", "nope"]  # standard_repo's models and a missing one


def valid_http() -> tuple[bytes, int]:
    """An infer body for `scale` (X [2, 3] FP32, binary) and its JSON header's length."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    header = json.dumps(
        {
            "id": "1",
            "inputs": [
                {
                    "name": "X",
                    "shape": [2, 3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                },
            ],
            "outputs": [{"name": "Y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + x.tobytes(), len(header)


def valid_grpc() -> bytes:
    """A serialized ModelInferRequest for `scale` (X [2, 3] of ones)."""
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="scale", id="7")
    request.inputs.add(name="X", datatype="FP32", shape=[2, 3])
    request.raw_input_contents.append(np.ones(6, np.float32).tobytes())
    request.outputs.add(name="Y")
    return request.SerializeToString()


def mutate_json(rng: random.Random) -> bytes:
    """A JSON infer document with one to three fields replaced by JUNK."""
    doc: Any = {
        "inputs": [{"name": "X", "shape": [2, 3], "datatype": "FP32", "data": [1.0] * 6}],
        "outputs": [{"name": "Y"}],
        "parameters": {},
    }
    targets = [doc, doc["inputs"][0], doc["outputs"][0]]
    keys = [
        "inputs",
        "outputs",
        "name",
        "shape",
        "datatype",
        "data",
        "parameters",
        "binary_data_size",
        "id",
    ]
    for _ in range(rng.randint(1, 3)):
        rng.choice(targets)[rng.choice(keys)] = rng.choice(JUNK)
    return json.dumps(doc).encode()


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """`data` with one to eight edits: a byte changed, the tail cut off, four bytes inserted."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(3)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)) :]
        else:
            b[rng.randrange(len(b) + 1) : 0] = bytes(rng.randrange(256) for _ in range(4))
    return bytes(b)


def http_case(rng: random.Random, i: int, valid: bytes, header_len: int) -> tuple[str, bytes, dict]:
    """The i-th mutated HTTP infer request: (model, body, headers). Every third is a JSON
    document, the others a binary body with mutated bytes, every third of which also gets a
    wrong Inference-Header-Content-Length."""
    headers = {}
    kind = i % 3
    if kind == 0:
        body = mutate_json(rng)
    else:
        body = mutate_bytes(rng, valid)
        length = header_len
        if kind == 1:
            length = rng.choice(
                [header_len, header_len + rng.randint(-9, 9), rng.randint(-5, 99999)]
            )
        headers["Inference-Header-Content-Length"] = str(length)
    return rng.choice(MODELS), body, headers
