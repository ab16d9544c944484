"""Model builders shared by the compiler, reference and (later) kernel-parity tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pyipu import demo
from pyipu.compiler import Compiler, CompilerOptions, Executable
from pyipu.compiler.ir import Instr, ModelIR, TensorSpec

ORT_IR_VERSION = 8  # onnx 1.23 writes IR 14, which onnxruntime rejects


def seed_overlap_io_model(seed: int = 0) -> onnx.ModelProto:
    """The overlap-I/O seed with weights scaled by 1/16 so activations stay O(1)."""
    return demo.seed_overlap_io_model(seed, weight_scale=1 / 16)


def fusion_model0(opset: int = 11) -> onnx.ModelProto:
    """Fusion seed model 0: O = Reshape(X + Y, [2]), float32, X and Y of shape (1, 2)."""
    g = helper.make_graph(
        [
            helper.make_node("Add", ["X", "Y"], ["Z"]),
            helper.make_node("Reshape", ["Z", "C"], ["O"]),
        ],
        "graph",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, (1, 2)),
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, (1, 2)),
        ],
        [helper.make_tensor_value_info("O", TensorProto.FLOAT, (2,))],
        [numpy_helper.from_array(np.array([2], dtype=np.int64), "C")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def fusion_model1(opset: int = 11) -> onnx.ModelProto:
    """Fusion seed model 1: O = Concat([X, C], axis=1), float16, X (1, 1), C = [[1.5, 2.0]]."""
    g = helper.make_graph(
        [helper.make_node("Concat", ["X", "C"], ["O"], axis=1)],
        "graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, (1, 1))],
        [helper.make_tensor_value_info("O", TensorProto.FLOAT16, (1, 3))],
        [numpy_helper.from_array(np.array([[1.5, 2.0]], dtype=np.float16), "C")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def single_node(
    op: str,
    inputs: Sequence[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 17,
    const_inputs: dict[int, np.ndarray] | None = None,
    num_outputs: int = 1,
) -> onnx.ModelProto:
    """A one-node model: runtime inputs in0, in1... (dtype and shape of `inputs`), constant
    inputs (initializers) at the positions in `const_inputs`, outputs out0, out1...
    Output types are left to shape inference."""
    const_inputs = const_inputs or {}
    names: list[str] = []
    graph_inputs = []
    inits = []
    it = iter(inputs)
    total = len(inputs) + len(const_inputs)
    for i in range(total):
        if i in const_inputs:
            arr = const_inputs[i]
            if arr is None:
                names.append("")
                continue
            names.append(f"c{i}")
            inits.append(numpy_helper.from_array(np.asarray(arr), f"c{i}"))
        else:
            x = next(it)
            names.append(f"in{i}")
            graph_inputs.append(
                helper.make_tensor_value_info(
                    f"in{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape
                )
            )
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    g = helper.make_graph(
        [node],
        op.lower(),
        graph_inputs,
        [helper.make_empty_tensor_value_info(o) for o in outs],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def feeds_of(model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return dict(zip(names, inputs, strict=False))


def compile_single_op(
    op: str,
    inputs: Sequence[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 17,
    const_inputs: dict[int, np.ndarray] | None = None,
    options: CompilerOptions | None = None,
) -> tuple[Executable, dict[str, np.ndarray], onnx.ModelProto]:
    """(Executable, feeds, model) for one node: feed the Executable to the reference or the
    C runtime (`Runner(exe).execute(feeds, outputs)`) and compare with onnxruntime(model)."""
    model = single_node(op, inputs, attrs, opset=opset, const_inputs=const_inputs)
    exe = Compiler.compile(model, None, options)
    return exe, feeds_of(model, inputs), model


def edited(
    exe: Executable,
    instr: Callable[[Instr], Instr] = lambda i: i,
    tensor: Callable[[int, TensorSpec], TensorSpec] = lambda k, t: t,
) -> Executable:
    """exe with every instruction passed through `instr` and every tensor (index, spec) through
    `tensor`: a program the compiler does not emit, for the verifier's rejections."""
    ir = exe.program
    progs = tuple(
        dataclasses.replace(p, instrs=tuple(instr(i) for i in p.instrs)) for p in ir.programs
    )
    tensors = tuple(tensor(k, t) for k, t in enumerate(ir.tensors))
    return Executable.from_program(dataclasses.replace(ir, programs=progs, tensors=tensors))


def with_attr(i: Instr, pos: int, value: int) -> Instr:
    """i with attribute `pos` set to `value`."""
    return dataclasses.replace(i, attrs=i.attrs[:pos] + (value,) + i.attrs[pos + 1 :])


def run_c(exe: Executable, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run one request through the C runtime (the tile interpreter on 2 worker threads)."""
    from pyipu import runtime

    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2)) as runner:
        outputs = {
            d.name: np.zeros(d.shape, d.numpy_data_type()) for d in runner.get_execute_outputs()
        }
        runner.execute(feeds, outputs)
    return outputs


def assert_matches_reference(
    got: dict[str, np.ndarray], ref: dict[str, np.ndarray], what: str = "C runtime"
) -> None:
    """The C kernels against the NumPy reference: exact for integers and bools; floats within
    rounding (the C side fuses multiply-adds and blocks its sums differently)."""
    assert set(got) == set(ref), (what, set(got), set(ref))
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, (what, name, g.dtype, g.shape, r.shape)
        if np.issubdtype(r.dtype, np.floating):
            tol = 2e-3 if r.dtype == np.float16 else 1e-5
            # finite magnitudes only: an infinity in the output would make atol infinite
            finite = np.abs(r.astype(np.float32)[np.isfinite(r)])
            scale = max(1.0, float(finite.max(initial=0)))
            np.testing.assert_allclose(
                g.astype(np.float32),
                r.astype(np.float32),
                rtol=tol,
                atol=tol * scale,
                err_msg=f"{what} vs reference: {name}",
            )
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{what} vs reference: {name}")


def assert_parity(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    """assert_matches_reference for float outputs with infinities: the same NaNs and infinities
    as the reference, finite values within rounding of the largest finite magnitude (an infinity
    must not widen the tolerance)."""
    assert set(got) == set(ref)
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, (name, g.dtype, g.shape, r.shape)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"{name}: NaNs")
        inf = np.isinf(r)
        np.testing.assert_array_equal(g[inf], r[inf], err_msg=f"{name}: infinities")
        fin = np.isfinite(r)
        g32, r32 = g[fin].astype(np.float32), r[fin].astype(np.float32)
        tol = 2e-3 if r.dtype == np.float16 else 1e-5
        scale = max(1.0, float(np.abs(r32).max(initial=0)))
        np.testing.assert_allclose(g32, r32, rtol=tol, atol=tol * scale, err_msg=name)


def check_parity(
    op: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None, **kw: Any
) -> None:
    """One op (opset 17) through the C kernels against the NumPy reference, by assert_parity."""
    exe, feeds, _ = compile_single_op(op, inputs, attrs, opset=17, **kw)
    assert_parity(run_c(exe, feeds), exe.run_reference(feeds))


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = ORT_IR_VERSION
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def random_array(
    shape: Sequence[int], dtype: Any, rng: np.random.Generator, low: float = -3, high: float = 3
) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dt, np.integer):
        lo = max(int(low), np.iinfo(dt).min)
        return rng.integers(lo, int(high) + 1, shape).astype(dt)
    return rng.uniform(low, high, shape).astype(dt)


def scale_model(shape: tuple[int, ...] = (4, 3)) -> onnx.ModelProto:
    """Y = 2 * X + 1, elementwise, so every row of the output depends on its own row only."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["X", "two"], ["T"]),
            helper.make_node("Add", ["T", "one"], ["Y"]),
        ],
        "scale",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
        [
            onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def matmul_model(n: int) -> onnx.ModelProto:
    """C = A @ B on [n, n] float32 inputs (the sgemm benchmark's model)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        f"sgemm_{n}",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("A", "B")],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


F32, F16, I32, I64 = np.float32, np.float16, np.int32, np.int64

BROADCASTS = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((1,), (2, 3)),
    ((), (2, 3)),
    ((2, 1, 4), (3, 1)),
    ((5,), ()),
]


def expected(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs; onnx.reference where ORT lacks a kernel for the dtype."""
    try:
        return run_ort(model, feeds)
    except Exception as e:  # onnxruntime NOT_IMPLEMENTED for some dtype/op pairs
        if "NOT_IMPLEMENTED" not in str(e) and "Could not find an implementation" not in str(e):
            raise
        from onnx.reference import ReferenceEvaluator

        names = [o.name for o in model.graph.output]
        return dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))


def check_op(
    op: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 17,
    const_inputs: dict[int, Any] | None = None,
    tol: float | None = None,
) -> ModelIR:
    exe, feeds, model = compile_single_op(op, inputs, attrs, opset=opset, const_inputs=const_inputs)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    want = expected(model, feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype, name
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            t = tol if tol is not None else (2e-2 if w.dtype == np.float16 else 1e-5)
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=t, atol=t)
        else:
            np.testing.assert_array_equal(g, w)
    return exe.program


def arr(shape: tuple[int, ...], dt: Any, seed: int = 0, **kw: Any) -> np.ndarray:
    return random_array(shape, dt, np.random.default_rng(seed), **kw)


def step_end_model() -> onnx.ModelProto:
    """Two stages with variables and a step-end program: stage 0 (IPU 0) Y = X * W, stage 1
    (IPU 1) Z = Y + 1 and SUM += Z every batch; at the end of every step W -= 0.5 * SUM and
    COUNT += 1. X, W, Y, Z, SUM: float32[2, 3]; COUNT: float32 scalar."""

    def placed(node: onnx.NodeProto, ipu: int | None) -> onnx.NodeProto:
        if ipu is None:
            node.attribute.append(helper.make_attribute("__step_end", 1))
        else:
            node.attribute.append(helper.make_attribute("__ipu_number", ipu))
            node.attribute.append(helper.make_attribute("__pipeline_stage", ipu))
        return node

    nodes = [
        placed(helper.make_node("Mul", ["X", "W"], ["Y"]), 0),
        placed(helper.make_node("Add", ["Y", "one"], ["Z"]), 1),
        placed(helper.make_node("Add", ["SUM", "Z"], ["SUM_new"]), 1),
        placed(helper.make_node("Mul", ["SUM", "half"], ["scaled"]), None),
        placed(helper.make_node("Sub", ["W", "scaled"], ["W_new"]), None),
        placed(helper.make_node("Add", ["COUNT", "one"], ["COUNT_new"]), None),
    ]
    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "W"),
        numpy_helper.from_array(np.zeros((2, 3), np.float32), "SUM"),
        numpy_helper.from_array(np.zeros((), np.float32), "COUNT"),
        numpy_helper.from_array(np.ones((), np.float32), "one"),
        numpy_helper.from_array(np.full((), 0.5, np.float32), "half"),
    ]
    g = helper.make_graph(
        nodes,
        "step_end",
        [helper.make_tensor_value_info("X", f32, [2, 3])],
        [helper.make_tensor_value_info("Z", f32, [2, 3])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = ORT_IR_VERSION
    from pyipu.compiler.variables import set_variables

    set_variables(m, {"W": "W_new", "SUM": "SUM_new", "COUNT": "COUNT_new"})
    return m


def step_end_reference(xs: np.ndarray, bps: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """What step_end_model computes for the batches `xs` run `bps` per step: each Z and the
    variables at the end."""
    w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    total = np.zeros((2, 3), np.float32)
    count = np.float32(0)
    zs = []
    for start in range(0, len(xs), bps):
        for x in xs[start : start + bps]:
            z = x * w + np.float32(1)
            total = total + z
            zs.append(z)
        w = w - np.float32(0.5) * total
        count += np.float32(1)
    return np.stack(zs), {"W": w, "SUM": total, "COUNT": np.asarray(count)}
