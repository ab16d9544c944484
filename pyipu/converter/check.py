"""Compare a converted model, and pyipu's run of its executable, with the original on random
inputs (Converter(check=True), --check, --run).

The models run under onnxruntime when it is installed, otherwise under onnx's reference
evaluator. Inputs are drawn for the converted model's (static) shapes in the original's dtypes
and cast to the converted model's dtypes, so int64→int32 and fp32→fp16 conversions are compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def output_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, max |want|) over the finite values; inf when the shapes differ
    or a value is non-finite where the reference's is not the same non-finite value (so a NaN
    never compares as small, whatever order the outputs come in)."""
    w = np.asarray(want, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    if g.size != w.size:
        return float("inf")
    g = g.reshape(w.shape)
    finite = np.isfinite(w)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    if not np.isfinite(g[finite]).all() or not same[~finite].all():
        return float("inf")
    scale = max(1.0, float(np.abs(w[finite]).max(initial=0.0)))
    return float(np.abs(g[finite] - w[finite]).max(initial=0.0)) / scale


def _tolerance(converted: onnx.ModelProto) -> float:
    half = any(
        o.type.tensor_type.elem_type == TensorProto.FLOAT16 for o in converted.graph.output
    ) or any(i.data_type == TensorProto.FLOAT16 for i in converted.graph.initializer)
    return FP16_TOLERANCE if half else FP32_TOLERANCE


def reference_outputs(
    original: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], str]:
    """The original model's outputs by name on `feeds` (drawn for the converted model, cast to
    the original's input dtypes), and the backend that ran it."""
    inits = {i.name for i in original.graph.initializer}
    orig_types = {v.name: v.type.tensor_type.elem_type for v in original.graph.input}
    orig_feeds = {
        n: a.astype(helper.tensor_dtype_to_np_dtype(orig_types[n]))
        for n, a in feeds.items()
        if n in orig_types and n not in inits
    }
    want, backend = run_model(original, orig_feeds)
    return dict(zip([o.name for o in original.graph.output], want, strict=True)), backend


def compare_models(
    original: onnx.ModelProto, converted: onnx.ModelProto, seed: int = 0
) -> CheckResult:
    """Run both on the same random data; errors are per output, scaled by the output's size."""
    feeds = random_inputs(converted, seed)
    by_name, backend = reference_outputs(original, feeds)
    got, _ = run_model(converted, feeds)
    names = [o.name for o in converted.graph.output]
    errors = {
        name: output_error(g, by_name[name])
        for name, g in zip(names, got, strict=True)
        if name in by_name  # not an added checkpoint output
    }
    return CheckResult(errors, _tolerance(converted), backend)


def run_executable_once(executable: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One request of a single-subgraph executable through the C runtime."""
    from pyipu.runtime import Runner

    with Runner(executable) as runner:
        outputs = {
            d.name: np.zeros(d.shape, d.numpy_data_type()) for d in runner.get_execute_outputs()
        }
        runner.execute({d.name: feeds[d.name] for d in runner.get_execute_inputs()}, outputs)
    return outputs


def compare_executable(
    executable: Any, original: onnx.ModelProto, converted: onnx.ModelProto, seed: int = 0
) -> CheckResult:
    """pyipu's own run of `executable` (compiled from `converted`) against the original model
    under onnxruntime (or onnx's reference), on the same random data as compare_models."""
    feeds = random_inputs(converted, seed)
    by_name, backend = reference_outputs(original, feeds)
    got = run_executable_once(executable, feeds)
    errors = {name: output_error(g, by_name[name]) for name, g in got.items() if name in by_name}
    return CheckResult(errors, _tolerance(converted), backend)
