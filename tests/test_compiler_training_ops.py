"""The ai.onnx.preview.training optimizers (Adagrad, Momentum, Adam) compiled and run by pyipu,
against onnx's reference evaluator: several tensors per node, first and later updates (T = 0
and T > 0), every attribute, float32 and float64 (through pyipu.backend), and the malformed
nodes the compiler refuses."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pyipu.backend
from pyipu.compiler import Compiler
from pyipu.compiler.errors import (
    CompileError,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
    UnsupportedError,
    UnsupportedOpError,
)
from pyipu.errors import Error
from pyipu.runtime import Runner

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": ("H",), "Momentum": ("V",), "Adam": ("V", "H")}
SHAPES = [(3,), (2, 4), (1,), (2, 1, 3)]


def _names(op: str, count: int) -> tuple[list[str], list[str]]:
    kinds = ["X", "G", *STATES[op]]
    inputs = ["R", "T"] + [f"{k}{i}" for k in kinds for i in range(count)]
    outputs = [f"{k}{i}_new" for k in ["X", *STATES[op]] for i in range(count)]
    return inputs, outputs


def _model(
    op: str,
    count: int,
    attrs: dict,
    elem: int = TensorProto.FLOAT,
    shapes: list[tuple[int, ...]] | None = None,
    domain_version: int = 1,
    **node_fields,
) -> onnx.ModelProto:
    inputs, outputs = _names(op, count)
    shapes = shapes or [SHAPES[i % len(SHAPES)] for i in range(count)]
    node = helper.make_node(op, inputs, outputs, domain=DOMAIN, **attrs)
    for field, value in node_fields.items():
        setattr(node, field, value)
    values = [helper.make_tensor_value_info("R", elem, []), _int_scalar("T")]
    for k, name in enumerate(inputs[2:]):
        shape = shapes[k % count] if count else ()
        values.append(helper.make_tensor_value_info(name, elem, shape))
    outs = [
        helper.make_tensor_value_info(name, elem, shapes[k % count])
        for k, name in enumerate(outputs)
    ]
    graph = helper.make_graph([node], op.lower(), values, outs)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(DOMAIN, domain_version)], ir_version=8
    )


def _int_scalar(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, [])


def _feeds(model: onnx.ModelProto, step: int, dtype, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {"R": np.array(0.05, dtype), "T": np.array(step, np.int64)}
    for vi in model.graph.input[2:]:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        v = rng.standard_normal(shape)
        if vi.name.startswith("H"):  # accumulated squares are not negative
            v = np.abs(v)
        feeds[vi.name] = v.astype(dtype)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    outs = [o.name for o in model.graph.output]
    with Runner(Compiler.compile(model, outs)) as runner:
        return runner.run(outs, feeds)


CASES = [
    ("Adagrad", {}),
    ("Adagrad", {"norm_coefficient": 0.01, "decay_factor": 0.1, "epsilon": 1e-3}),
    ("Momentum", {"norm_coefficient": 0.0, "alpha": 0.9, "beta": 0.5, "mode": "standard"}),
    ("Momentum", {"norm_coefficient": 0.02, "alpha": 0.8, "beta": 1.0, "mode": "nesterov"}),
    ("Adam", {}),
    (
        "Adam",
        {
            "norm_coefficient": 0.01,
            "norm_coefficient_post": 0.05,
            "alpha": 0.7,
            "beta": 0.6,
            "epsilon": 1e-2,
        },
    ),
]


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("step", [0, 1, 7])
@pytest.mark.parametrize(("op", "attrs"), CASES, ids=lambda c: str(c))
def test_float32_matches_the_reference(op: str, attrs: dict, step: int, count: int) -> None:
    model = _model(op, count, attrs)
    feeds = _feeds(model, step, np.float32, seed=count + step)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _run(model, feeds)
    assert len(got) == count * (1 + len(STATES[op]))
    for name, a, b in zip([o.name for o in model.graph.output], got, want, strict=True):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6, err_msg=name)
        # the update moved X (or the state) by more than the tolerance: not an identity
        source = feeds[name.removesuffix("_new")]
        assert not np.allclose(a, source, rtol=1e-4, atol=1e-5), name


@pytest.mark.parametrize(("op", "attrs"), CASES[1::2], ids=lambda c: str(c))
def test_float64_runs_through_the_backend(op: str, attrs: dict) -> None:
    model = _model(op, 3, attrs, elem=TensorProto.DOUBLE)
    feeds = _feeds(model, 4, np.float64, seed=5)
    want = ReferenceEvaluator(model).run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyipu.backend.Float64Warning)
        rep = pyipu.backend.prepare(model)
        got = rep.run([feeds[i.name] for i in model.graph.input])
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_one_element_learning_rate_and_scalar_tensors() -> None:
    """R of shape [1] is read as the scalar it holds; a scalar X stays a scalar."""
    model = _model("Momentum", 1, CASES[3][1], shapes=[()])
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("R", TensorProto.FLOAT, [1]))
    feeds = _feeds(model, 2, np.float32)
    feeds["R"] = feeds["R"].reshape(1)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _run(model, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.shape == ()
        np.testing.assert_allclose(a, b, rtol=2e-6)


def _compile(model: onnx.ModelProto) -> None:
    Compiler.compile(model, [o.name for o in model.graph.output])


def test_wrong_input_count() -> None:
    model = _model("Adam", 2, {})
    node = model.graph.node[0]
    node.input.pop()  # one H missing: 7 tensors for 4 per updated tensor
    model.graph.input.pop()
    with pytest.raises(UnsupportedAttributeError, match="4 inputs per tensor .* got 9 inputs"):
        _compile(model)


def test_wrong_output_count() -> None:
    model = _model("Adagrad", 2, {})
    model.graph.node[0].output.pop()
    model.graph.output.pop()
    # ONNX's shape inference or the lowering refuses it
    with pytest.raises(CompileError, match="4 outputs, got 3|Output 3 is out of bounds"):
        _compile(model)


def test_extra_output() -> None:
    model = _model("Adagrad", 1, {})
    model.graph.node[0].output.append("extra")
    with pytest.raises(CompileError, match="2 outputs, got 3|out of bounds"):
        _compile(model)


def test_no_tensor_to_update() -> None:
    model = _model("Momentum", 1, CASES[2][1])
    node = model.graph.node[0]
    del node.input[2:]
    with pytest.raises(Error, match="takes R, T"):
        _compile(model)


def test_mismatched_shapes() -> None:
    model = _model("Momentum", 2, CASES[2][1])
    # G1 of another shape than X1
    g1 = next(i for i in model.graph.input if i.name == "G1")
    g1.CopyFrom(helper.make_tensor_value_info("G1", TensorProto.FLOAT, [5]))
    with pytest.raises(ShapeError, match="'G1'\\) has shape \\[5\\], the tensor it belongs to"):
        _compile(model)


def test_learning_rate_must_be_a_scalar() -> None:
    model = _model("Adagrad", 1, {})
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("R", TensorProto.FLOAT, [2]))
    with pytest.raises(ShapeError, match="input 0 \\(R\\) must be a scalar"):
        _compile(model)


def test_update_count_must_be_int64() -> None:
    model = _model("Adam", 1, {})
    model.graph.input[1].CopyFrom(helper.make_tensor_value_info("T", TensorProto.FLOAT, []))
    with pytest.raises(UnsupportedDTypeError, match="float32 is not supported .*'int64'"):
        _compile(model)


def test_float16_tensors_are_refused() -> None:
    model = _model("Adagrad", 1, {}, elem=TensorProto.FLOAT16)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("R", TensorProto.FLOAT, []))
    with pytest.raises(UnsupportedDTypeError, match="float16 is not supported"):
        _compile(model)


def test_unknown_momentum_mode() -> None:
    model = _model("Momentum", 1, {**CASES[2][1], "mode": "heavy_ball"})
    with pytest.raises(UnsupportedAttributeError, match="mode 'heavy_ball'"):
        _compile(model)


def test_missing_required_attribute() -> None:
    attrs = dict(CASES[2][1])
    del attrs["alpha"]
    model = _model("Momentum", 1, attrs)
    with pytest.raises(UnsupportedAttributeError, match="required attribute 'alpha'"):
        _compile(model)


def test_other_domain_version() -> None:
    model = _model("Adam", 1, {}, domain_version=2)
    with pytest.raises(UnsupportedError, match="opset 2 is not supported"):
        _compile(model)


def test_the_optimizers_in_the_default_domain_are_unknown() -> None:
    model = _model("Adam", 1, {}, domain="")
    model.opset_import.append(helper.make_opsetid("", 17))
    with pytest.raises(UnsupportedOpError, match="op Adam of domain 'ai.onnx' is not supported"):
        _compile(model)
