"""Compare a converted model with its original on random inputs (Converter(check=True), --check).

Both models run under onnxruntime when it is installed, otherwise under onnx's reference
evaluator. Inputs are drawn for the converted model's (static) shapes in the original's dtypes
and cast to the converted model's dtypes, so int64→int32 and fp32→fp16 conversions are compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from pyipu.compiler.errors import ShapeError

ORT_MAX_IR_VERSION = 8  # newer onnx writes IR versions older onnxruntime builds reject
# max |converted - original| / max(1, max |original|) allowed per output
FP32_TOLERANCE = 1e-4
FP16_TOLERANCE = 2e-2


@dataclass(frozen=True)
class CheckResult:
    errors: dict[str, float]  # output name → scaled max abs error
    tolerance: float
    backend: str

    @property
    def max_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for every runtime input (needs static shapes); small ints, normal floats."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim]
        if any(d < 1 for d in dims):
            raise ShapeError(
                f"input {vi.name!r} has a dynamic shape; set input_shape to check or run it"
            )
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, dims).astype(bool)
        else:  # small non-negative values: valid as indices and sizes in most models
            feeds[vi.name] = rng.integers(0, 2, dims).astype(dtype)
    return feeds


def run_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list, str]:
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(model).run(None, feeds)), "onnx.reference"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, ORT_MAX_IR_VERSION)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds), "onnxruntime"


def compare_models(
    original: onnx.ModelProto, converted: onnx.ModelProto, seed: int = 0
) -> CheckResult:
    """Run both on the same random data; errors are per output, scaled by the output's size."""
    feeds = random_inputs(converted, seed)
    inits = {i.name for i in original.graph.initializer}
    orig_types = {v.name: v.type.tensor_type.elem_type for v in original.graph.input}
    orig_feeds = {
        n: a.astype(helper.tensor_dtype_to_np_dtype(orig_types[n]))
        for n, a in feeds.items()
        if n in orig_types and n not in inits
    }
    want, backend = run_model(original, orig_feeds)
    got, _ = run_model(converted, feeds)
    names = [o.name for o in converted.graph.output]
    by_name = dict(zip([o.name for o in original.graph.output], want, strict=True))
    errors = {}
    for name, g in zip(names, got, strict=True):
        if name not in by_name:  # an added checkpoint output
            continue
        w = np.asarray(by_name[name], dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        errors[name] = float(np.abs(g - w).max(initial=0.0)) / scale
    half = any(
        o.type.tensor_type.elem_type == TensorProto.FLOAT16 for o in converted.graph.output
    ) or any(i.data_type == TensorProto.FLOAT16 for i in converted.graph.initializer)
    return CheckResult(errors, FP16_TOLERANCE if half else FP32_TOLERANCE, backend)
