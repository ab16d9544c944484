"""KServe v2 (Open Inference Protocol) tensors: datatypes, JSON and binary-extension decoding,
response encoding, and the gRPC messages' tensor fields."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyipu.serve.errors import BadRequestError

# KServe v2 datatype names and their NumPy dtypes (BYTES and BF16 are not model dtypes here).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_NAME_OF = {dt: name for name, dt in DATATYPES.items()}

# The ModelInferRequest.InferTensorContents field holding each datatype's typed values.
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}

HEADER_LENGTH = "Inference-Header-Content-Length"
_MAX_DIMS = 32  # the runtime's limit on a tensor's rank


def datatype_of(dtype: np.dtype) -> str:
    """The KServe datatype name of a NumPy dtype."""
    return _NAME_OF[np.dtype(dtype)]


@dataclass
class RequestedOutput:
    name: str
    binary: bool = False


@dataclass
class InferRequest:
    """A decoded request: its inputs as arrays and the outputs it asks for (None: all)."""

    id: str = ""
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: list[RequestedOutput] | None = None
    binary_output: bool = False  # request-level "binary_data_output"
    timeout_s: float | None = None  # the request's own "timeout" parameter (or gRPC deadline)


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, (list, tuple)) or len(shape) > _MAX_DIMS:
        raise BadRequestError(f"input {name!r}: shape must be a list of at most {_MAX_DIMS} ints")
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0 or d > 1 << 40:
            raise BadRequestError(f"input {name!r}: bad dimension {d!r} in shape {shape!r}")
        dims.append(d)
    return tuple(dims)


def check_datatype(name: str, datatype: Any) -> np.dtype:
    dt = DATATYPES.get(datatype) if isinstance(datatype, str) else None
    if dt is None:
        raise BadRequestError(
            f"input {name!r}: datatype {datatype!r} is not supported "
            f"(one of {', '.join(DATATYPES)})"
        )
    return dt


def array_from_bytes(name: str, raw: bytes | memoryview, dt: np.dtype, shape: tuple) -> np.ndarray:
    """A writable C-contiguous array of `shape` from little-endian bytes, size checked."""
    need = math.prod(shape) * dt.itemsize
    if len(raw) != need:
        raise BadRequestError(
            f"input {name!r}: {len(raw)} bytes of data, shape {list(shape)} of "
            f"{datatype_of(dt)} needs {need}"
        )
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt).reshape(shape)


def _array_from_json(name: str, data: Any, dt: np.dtype, shape: tuple) -> np.ndarray:
    if not isinstance(data, list):
        raise BadRequestError(f"input {name!r}: 'data' must be a list")
    try:
        flat = np.asarray(data, dtype=object).reshape(-1)
    except (ValueError, RecursionError) as e:  # ragged or too deep nesting
        raise BadRequestError(f"input {name!r}: 'data' is not a regular nested list") from e
    if flat.size != math.prod(shape):
        raise BadRequestError(
            f"input {name!r}: {flat.size} values for shape {list(shape)} "
            f"({math.prod(shape)} values)"
        )
    want_bool = dt == np.bool_
    for v in flat:
        ok = isinstance(v, bool) if want_bool else isinstance(v, (int, float))
        if not ok or (dt.kind in "iu" and not isinstance(v, int)):
            raise BadRequestError(f"input {name!r}: value {v!r} is not {datatype_of(dt)}")
    try:
        with np.errstate(over="raise", invalid="raise"):
            if dt.kind in "iu":
                info = np.iinfo(dt)
                if any(v < info.min or v > info.max for v in flat):
                    raise BadRequestError(f"input {name!r}: a value is out of range for {dt}")
            return np.array(flat.tolist(), dtype=dt).reshape(shape)
    except (OverflowError, FloatingPointError, ValueError, TypeError) as e:
        raise BadRequestError(f"input {name!r}: {e}") from e


def decode_http(body: bytes, header_length: str | None, max_bytes: int) -> InferRequest:
    """Parse an HTTP infer body: JSON, or JSON then binary tensor data (the binary extension)."""
    if len(body) > max_bytes:
        raise BadRequestError(f"request body of {len(body)} bytes exceeds {max_bytes}")
    if header_length is None:
        header, binary = body, memoryview(b"")
    else:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if n < 0 or n > len(body):
            raise BadRequestError(f"bad {HEADER_LENGTH}: {header_length!r}")
        header, binary = body[:n], memoryview(body)[n:]
    try:
        doc = json.loads(header)
    except (ValueError, RecursionError) as e:
        raise BadRequestError(f"request is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise BadRequestError("request must be a JSON object")
    req = InferRequest(id=str(doc.get("id", "")))
    params = _params(doc, "request")
    req.binary_output = params.get("binary_data_output") is True
    req.timeout_s = _timeout(params.get("timeout"))
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequestError("request needs a non-empty 'inputs' list")
    offset = 0
    for spec in inputs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise BadRequestError("each input must be an object with a 'name'")
        name = spec["name"]
        if name in req.inputs:
            raise BadRequestError(f"input {name!r} given twice")
        shape = check_shape(name, spec.get("shape"))
        dt = check_datatype(name, spec.get("datatype"))
        size = _params(spec, f"input {name!r}").get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise BadRequestError(f"input {name!r}: bad binary_data_size {size!r}")
            if "data" in spec:
                raise BadRequestError(f"input {name!r} has both 'data' and binary_data_size")
            if offset + size > len(binary):
                raise BadRequestError(f"input {name!r}: binary data ends before {size} bytes")
            req.inputs[name] = array_from_bytes(name, binary[offset : offset + size], dt, shape)
            offset += size
        else:
            if "data" not in spec:
                raise BadRequestError(f"input {name!r} has neither 'data' nor binary_data_size")
            req.inputs[name] = _array_from_json(name, spec["data"], dt, shape)
    if offset != len(binary):
        raise BadRequestError(f"{len(binary) - offset} bytes of binary data belong to no input")
    outputs = doc.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise BadRequestError("'outputs' must be a list")
        req.outputs = []
        for spec in outputs:
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise BadRequestError("each requested output must be an object with a 'name'")
            binary_flag = _params(spec, f"output {spec['name']!r}").get("binary_data")
            req.outputs.append(RequestedOutput(spec["name"], binary_flag is True))
    return req


def _timeout(value: Any) -> float | None:
    """The "timeout" request parameter (microseconds, Triton's meaning) in seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadRequestError(f"bad timeout parameter {value!r} (positive microseconds)")
    return value / 1e6


def _params(obj: dict, what: str) -> dict:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise BadRequestError(f"{what}: 'parameters' must be an object")
    return params


def encode_http(
    model: str, version: str, req: InferRequest, results: dict[str, np.ndarray]
) -> tuple[bytes, int | None]:
    """The response body and, when any output is binary, the JSON header's length."""
    wanted = req.outputs
    if wanted is None:
        wanted = [RequestedOutput(n, req.binary_output) for n in results]
    outs, chunks = [], []
    for out in wanted:
        array = results[out.name]
        entry: dict[str, Any] = {
            "name": out.name,
            "datatype": datatype_of(array.dtype),
            "shape": list(array.shape),
        }
        if out.binary or req.binary_output:
            raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = array.reshape(-1).tolist()
        outs.append(entry)
    doc: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": outs}
    if req.id:
        doc["id"] = req.id
    header = json.dumps(doc, allow_nan=True).encode()
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def decode_grpc(request: Any, max_bytes: int) -> InferRequest:
    """A ModelInferRequest's tensors (raw_input_contents or typed contents) as arrays."""
    req = InferRequest(id=request.id)
    if "timeout" in request.parameters:
        req.timeout_s = _timeout(request.parameters["timeout"].int64_param)
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise BadRequestError(
            f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: give all or none"
        )
    if not request.inputs:
        raise BadRequestError("request needs at least one input")
    total = 0
    for i, spec in enumerate(request.inputs):
        name = spec.name
        if name in req.inputs:
            raise BadRequestError(f"input {name!r} given twice")
        shape = check_shape(name, list(spec.shape))
        dt = check_datatype(name, spec.datatype)
        total += math.prod(shape) * dt.itemsize
        if total > max_bytes:
            raise BadRequestError(f"inputs exceed {max_bytes} bytes")
        if raw:
            req.inputs[name] = array_from_bytes(name, raw[i], dt, shape)
            continue
        field_name = CONTENTS_FIELD.get(spec.datatype)
        if field_name is None:
            raise BadRequestError(f"input {name!r}: {spec.datatype} needs raw_input_contents")
        values = list(getattr(spec.contents, field_name))
        if len(values) != math.prod(shape):
            raise BadRequestError(
                f"input {name!r}: {len(values)} values for shape {list(shape)} "
                f"({math.prod(shape)} values)"
            )
        try:
            with np.errstate(over="raise", invalid="raise"):
                req.inputs[name] = np.array(values, dtype=dt).reshape(shape)
        except (OverflowError, FloatingPointError, ValueError) as e:
            raise BadRequestError(f"input {name!r}: {e}") from e
    if request.outputs:
        req.outputs = [RequestedOutput(o.name, True) for o in request.outputs]
    return req


def encode_grpc(response: Any, req: InferRequest, results: dict[str, np.ndarray]) -> None:
    """Fill a ModelInferResponse's outputs (raw_output_contents, as Triton answers)."""
    names = [o.name for o in req.outputs] if req.outputs is not None else list(results)
    for name in names:
        array = results[name]
        out = response.outputs.add()
        out.name = name
        out.datatype = datatype_of(array.dtype)
        out.shape.extend(array.shape)
        response.raw_output_contents.append(
            np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        )


INLINE_BYTES = 256 << 10  # bodies and results up to this size are coded on the event loop


async def infer_http(
    model: Any,
    body: bytes,
    header_length: str | None,
    max_bytes: int,
    metrics: Any,
    run_io: Callable[..., Awaitable[Any]],
) -> tuple[bytes, int | None]:
    """One HTTP infer request on `model` (a LoadedModel): decoded, run, encoded; a body or
    results larger than INLINE_BYTES are decoded and encoded by `run_io`, off the event loop
    (JSON tensors take a while)."""
    if len(body) > INLINE_BYTES:
        req = await run_io(decode_http, body, header_length, max_bytes)
    else:
        req = decode_http(body, header_length, max_bytes)
    results = await model.infer(req, metrics, "http")
    if sum(a.nbytes for a in results.values()) > INLINE_BYTES:
        return await run_io(encode_http, model.name, model.version, req, results)
    return encode_http(model.name, model.version, req, results)
