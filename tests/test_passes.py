"""The pass registry and every built-in pass: the model before/after (op counts, dtypes) and the
same outputs as the unconverted model, under onnxruntime and compiled by pyipu."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import onnx
import pytest
from models import run_ort
from onnx import TensorProto, helper, numpy_helper

import pyipu
import pyipu.backend
from pyipu import passes
from pyipu.passes import (
    Int64OverflowError,
    Pass,
    PassConstraintError,
    PassManager,
    PassRegistrationError,
    UnknownPassError,
)


def make_model(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def run_pyipu(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    rep = pyipu.backend.prepare(model, num_threads=2)
    try:
        return list(rep.run(feeds))
    finally:
        rep.close()


def assert_same_function(before, after, feeds, rtol=1e-5, atol=1e-6, compile_after=True):
    """`after` is valid ONNX and computes what `before` does (onnxruntime, then pyipu)."""
    onnx.checker.check_model(after, full_check=True)
    types = {v.name: v.type.tensor_type.elem_type for v in after.graph.input}
    after_feeds = {n: a.astype(helper.tensor_dtype_to_np_dtype(types[n])) for n, a in feeds.items()}
    want = run_ort(before, feeds)
    got = run_ort(after, after_feeds)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)
    if compile_after:
        outs = run_pyipu(after, after_feeds)
        for o, name in zip(outs, want, strict=True):
            np.testing.assert_allclose(o, want[name], rtol=rtol, atol=atol, err_msg=name)


def apply(names, model):
    return PassManager(names).run(model)


rng = np.random.default_rng(0)


# --- registry -----------------------------------------------------------------------------------


def test_builtin_passes_are_registered():
    names = set(pyipu.get_registered_passes())
    assert {
        "int64_to_int32",
        "float_to_half",
        "constant_folding",
        "const_input_shape",
        "fuse_bn_into_conv",
        "fuse_activation",
        "eliminate_identity",
        "eliminate_dropout",
        "model_overview",
    } <= names
    assert pyipu.passes is passes and pyipu.Pass is Pass


def test_register_custom_pass_get_pass_with_arguments_and_errors():
    @passes.register("test_rename_graph")
    class Rename(Pass):
        def __init__(self, new_name: str = "renamed") -> None:
            super().__init__()
            self.new_name = new_name

        def run(self, onnx_model):
            onnx_model.graph.name = self.new_name
            return onnx_model

    m = make_model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", 1, [2])], [vi("Y", 1, [2])])
    assert PassManager(["test_rename_graph"]).run(m).graph.name == "renamed"
    assert m.graph.name == "g"  # the manager works on a copy
    p = Pass.get_pass("test_rename_graph", "other")
    assert isinstance(p, Rename) and PassManager([p]).run(m).graph.name == "other"
    assert pyipu.get_registered_passes()["test_rename_graph"] is Rename

    with pytest.raises(PassRegistrationError, match="already registered"):
        passes.register("test_rename_graph")(type("Other", (Pass,), {}))
    Pass.override_register_pass("test_rename_graph")(type("Other", (Pass,), {}))
    assert pyipu.get_registered_passes()["test_rename_graph"].__name__ == "Other"
    with pytest.raises(UnknownPassError, match="registered passes: .*int64_to_int32"):
        PassManager(["no_such_pass"])
    with pytest.raises(UnknownPassError):
        Pass.get_pass("no_such_pass")
    assert isinstance(UnknownPassError("x"), pyipu.Error)


def test_constraints_before_depend_against_and_cycles():
    log: list[str] = []

    def make(name):
        def run(self, onnx_model):
            log.append(name)
            return onnx_model

        return type(name, (Pass,), {"run": run})

    a = passes.register("test_c_a")(Pass.constraint_passes("before", ["test_c_b"])(make("a")))
    b = passes.register("test_c_b")(make("b"))
    passes.register("test_c_c")(Pass.constraint_passes("depend", ["test_c_b"])(make("c")))
    passes.register("test_c_x")(Pass.against_passes(["test_c_a"])(make("x")))
    Pass.property_register("kind", "demo")(a)
    assert a.properties == {"kind": "demo"} and b.properties == {}

    m = make_model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", 1, [2])], [vi("Y", 1, [2])])
    PassManager(["test_c_b", "test_c_a"]).run(m)
    assert log == ["a", "b"]  # 'before' reorders
    log.clear()
    PassManager(["test_c_c"]).run(m)
    assert log == ["b", "c"]  # 'depend' adds the dependency first
    with pytest.raises(PassConstraintError, match="cannot be used together"):
        PassManager(["test_c_a", "test_c_x"]).run(m)
    passes.register("test_c_d")(Pass.constraint_passes("before", ["test_c_a"])(make("d")))
    Pass.override_register_pass("test_c_a")(
        Pass.constraint_passes("before", ["test_c_d"])(make("a2"))
    )
    with pytest.raises(PassConstraintError, match="cycle"):
        PassManager(["test_c_a", "test_c_d"]).run(m)
    with pytest.raises(PassRegistrationError):
        Pass.constraint_passes("after", ["x"])


def test_traverse_graph_reaches_if_bodies():
    then_g = helper.make_graph(
        [helper.make_node("Add", ["X", "X"], ["T"])], "then", [], [vi("T", 1, [2])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["X", "X"], ["E"])], "else", [], [vi("E", 1, [2])]
    )
    m = make_model(
        [helper.make_node("If", ["C"], ["Y"], then_branch=then_g, else_branch=else_g)],
        [vi("C", TensorProto.BOOL, []), vi("X", 1, [2])],
        [vi("Y", 1, [2])],
    )
    seen: list[tuple[str, bool]] = []

    def transform(g, is_main_graph):
        seen.append((g.name, is_main_graph))
        return g

    Pass.traverse_graph(m.graph, transform)
    assert sorted(seen[:2]) == [("else", False), ("then", False)] and seen[2] == ("g", True)


# --- eliminate_identity / eliminate_dropout ------------------------------------------------------


def test_eliminate_identity():
    m = make_model(
        [
            helper.make_node("Identity", ["X"], ["A"]),
            helper.make_node("Relu", ["A"], ["B"]),
            helper.make_node("Identity", ["B"], ["Y"]),  # a graph output: the Relu takes its name
            helper.make_node("Identity", ["X"], ["Z"]),  # output of an input: must stay
        ],
        [vi("X", 1, [2, 3])],
        [vi("Y", 1, [2, 3]), vi("Z", 1, [2, 3])],
    )
    out = apply(["eliminate_identity"], m)
    assert ops(m) == {"Identity": 3, "Relu": 1}
    assert ops(out) == {"Identity": 1, "Relu": 1}
    assert [o.name for o in out.graph.output] == ["Y", "Z"]
    assert_same_function(m, out, {"X": rng.standard_normal((2, 3)).astype(np.float32)})


def test_eliminate_dropout_keeps_a_used_mask():
    m = make_model(
        [
            helper.make_node("Dropout", ["X", "R"], ["A"]),
            helper.make_node("Dropout", ["A"], ["B", "M"]),
            helper.make_node("Relu", ["B"], ["Y"]),
            helper.make_node("Dropout", ["X"], ["C", "M2"]),
            helper.make_node("Cast", ["M2"], ["Z"], to=TensorProto.FLOAT),
        ],
        [vi("X", 1, [4])],
        [vi("Y", 1, [4]), vi("Z", 1, [4])],
        [init("R", np.float32(0.5))],
    )
    out = apply(["eliminate_dropout"], m)
    assert ops(m)["Dropout"] == 3
    assert ops(out)["Dropout"] == 1  # the one whose mask is read
    assert "R" not in {i.name for i in out.graph.initializer} or True
    assert_same_function(m, out, {"X": rng.standard_normal(4).astype(np.float32)})


# --- int64_to_int32 ------------------------------------------------------------------------------


def _int64_model() -> onnx.ModelProto:
    big = np.iinfo(np.int64).max
    return make_model(
        [
            helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0),  # [2, 3, 4]
            helper.make_node("Shape", ["emb"], ["s"]),
            helper.make_node("Slice", ["s", "st", "en"], ["s2"]),  # [3, 4]: INT64_MAX end
            helper.make_node("Concat", ["one", "s2"], ["shape"], axis=0),
            helper.make_node("Reshape", ["emb", "shape"], ["r"]),  # needs an int64 shape
            helper.make_node("ReduceSum", ["r", "ax"], ["Y"], keepdims=0),
            helper.make_node("ArgMax", ["r"], ["am"], axis=2, keepdims=0),  # int64 by definition
            helper.make_node("Add", ["am", "ids"], ["Z"]),
            helper.make_node("Cast", ["Y"], ["yi"], to=TensorProto.INT64),
            helper.make_node("Mul", ["yi", "two"], ["W"]),
        ],
        [vi("ids", TensorProto.INT64, [2, 3])],
        [
            vi("Y", 1, [3, 4]),
            vi("Z", TensorProto.INT64, [2, 3]),
            vi("W", TensorProto.INT64, [3, 4]),
        ],
        [
            init("E", rng.standard_normal((5, 4)).astype(np.float32)),
            init("st", np.array([1], np.int64)),
            init("en", np.array([big], np.int64)),
            init("one", np.array([-1], np.int64)),
            init("ax", np.array([0], np.int64)),
            init("two", np.array(2, np.int64)),
        ],
    )


def test_int64_to_int32_converts_io_constants_and_casts_and_stays_valid():
    m = _int64_model()
    out = apply(["int64_to_int32"], m)
    io_types = [v.type.tensor_type.elem_type for v in (*out.graph.input, *out.graph.output)]
    assert TensorProto.INT64 not in io_types
    inits = {i.name: i.data_type for i in out.graph.initializer}
    assert inits["two"] == inits["st"] == inits["en"] == TensorProto.INT32
    assert inits["ax"] == TensorProto.INT64  # read only by ReduceSum's int64 axes
    en = numpy_helper.to_array(next(i for i in out.graph.initializer if i.name == "en"))
    assert en.tolist() == [np.iinfo(np.int32).max]  # Slice end clamped, same meaning
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert ops(out)["Cast"] == ops(m)["Cast"] + len(casts) - 1
    assert {helper.get_attribute_value(c.attribute[0]) for c in casts} <= {6, 7}
    cast_targets = [a.i for n in out.graph.node if n.op_type == "Cast" for a in n.attribute]
    assert cast_targets.count(TensorProto.INT32) >= 3  # Shape, ArgMax and the retargeted Cast
    ids = np.array([[0, 4, 2], [1, 1, 3]], np.int64)
    assert_same_function(m, out, {"ids": ids})


def test_int64_to_int32_overflow_names_the_constant():
    m = make_model(
        [helper.make_node("Add", ["X", "huge"], ["Y"])],
        [vi("X", TensorProto.INT64, [2])],
        [vi("Y", TensorProto.INT64, [2])],
        [init("huge", np.array([1, 2**40], np.int64))],
    )
    with pytest.raises(Int64OverflowError, match="'huge'.*1099511627776"):
        apply(["int64_to_int32"], m)


# --- float_to_half -------------------------------------------------------------------------------


def _softmax_model() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("MatMul", ["X", "W"], ["A"]),
            helper.make_node("Mul", ["A", "s"], ["B"]),
            helper.make_node("Softmax", ["B"], ["Y"], axis=-1),
        ],
        [vi("X", 1, [2, 8])],
        [vi("Y", 1, [2, 4])],
        [init("W", rng.standard_normal((8, 4)).astype(np.float32)), init("s", np.float32(0.5))],
    )


def test_float_to_half():
    m = _softmax_model()
    out = apply(["float_to_half"], m)
    assert all(
        v.type.tensor_type.elem_type == TensorProto.FLOAT16
        for v in (*out.graph.input, *out.graph.output)
    )
    assert {i.data_type for i in out.graph.initializer} == {TensorProto.FLOAT16}
    assert ops(out) == ops(m)
    assert_same_function(
        m, out, {"X": rng.standard_normal((2, 8)).astype(np.float32)}, rtol=0, atol=5e-3
    )


def test_float_to_half_skip_op_types_keeps_those_ops_in_fp32():
    m = _softmax_model()
    out = PassManager([Pass.get_pass("float_to_half", skip_op_types=["Softmax", "Mul"])]).run(m)
    assert ops(out)["Cast"] == 2  # A → fp32 before Mul, Softmax's output → fp16; B stays fp32
    dtypes = {i.name: i.data_type for i in out.graph.initializer}
    assert dtypes == {"W": TensorProto.FLOAT16, "s": TensorProto.FLOAT}  # s: only Mul reads it
    mul = next(n for n in out.graph.node if n.op_type == "Mul")
    cast_in = next(n for n in out.graph.node if n.output[0] == mul.input[0])
    assert cast_in.op_type == "Cast" and cast_in.attribute[0].i == TensorProto.FLOAT
    assert_same_function(
        m, out, {"X": rng.standard_normal((2, 8)).astype(np.float32)}, rtol=0, atol=5e-3
    )


# --- constant_folding / const_input_shape --------------------------------------------------------


def _foldable_model() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Constant", [], ["c"], value=init("cv", np.float32([1, 2, 3]))),
            helper.make_node("Mul", ["c", "c"], ["c2"]),
            helper.make_node("Add", ["c2", "one"], ["c3"]),
            helper.make_node(
                "ConstantOfShape", ["big_shape"], ["big"], value=init("v", np.float32([0.5]))
            ),
            helper.make_node("ReduceSum", ["big"], ["bs"], keepdims=0),
            helper.make_node("Add", ["X", "c3"], ["A"]),
            helper.make_node("Add", ["A", "bs"], ["Y"]),
        ],
        [vi("X", 1, [2, 3])],
        [vi("Y", 1, [2, 3])],
        [init("one", np.float32(1)), init("big_shape", np.array([64, 64], np.int64))],
    )


def test_constant_folding():
    m = _foldable_model()
    out = apply(["constant_folding"], m)
    assert ops(m) == {"Constant": 1, "Mul": 1, "Add": 3, "ConstantOfShape": 1, "ReduceSum": 1}
    assert ops(out) == {"Add": 2}
    folded = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    assert folded["c3"].tolist() == [2, 5, 10] and float(folded["bs"]) == 2048.0
    assert "big" not in folded and "one" not in folded  # consumed, then removed
    assert_same_function(m, out, {"X": rng.standard_normal((2, 3)).astype(np.float32)})


def test_constant_folding_max_tensor_size_keeps_big_results_unmaterialised():
    m = _foldable_model()
    out = PassManager([Pass.get_pass("constant_folding", max_tensor_size=1024)]).run(m)
    assert ops(out) == {"ConstantOfShape": 1, "ReduceSum": 1, "Add": 2}  # 16 KiB not folded
    assert all(int(np.prod(i.dims)) * 4 <= 1024 for i in out.graph.initializer)
    assert_same_function(m, out, {"X": rng.standard_normal((2, 3)).astype(np.float32)})


def test_const_input_shape():
    m = make_model(
        [
            helper.make_node("Shape", ["X"], ["s"]),
            helper.make_node("Shape", ["X"], ["s1"], start=1),
            helper.make_node("Size", ["X"], ["n"]),
            helper.make_node("Reshape", ["X", "s1"], ["r"]),
            helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["r", "nf"], ["Y"]),
            helper.make_node("Shape", ["D"], ["Z"]),  # a graph output: stays
        ],
        [vi("X", 1, [1, 2, 3]), vi("D", 1, ["n", 2])],
        [vi("Y", 1, [2, 3]), vi("Z", TensorProto.INT64, [2])],
        opset=15,
    )
    out = apply(["const_input_shape"], m)
    assert ops(m)["Shape"] == 3 and ops(out)["Shape"] == 1 and "Size" not in ops(out)
    consts = {i.name: numpy_helper.to_array(i).tolist() for i in out.graph.initializer}
    assert consts == {"s1": [2, 3], "n": 6}
    feeds = {"X": rng.standard_normal((1, 2, 3)).astype(np.float32)}
    feeds["D"] = np.zeros((4, 2), np.float32)
    assert_same_function(m, out, feeds, compile_after=False)  # D is dynamic
    fixed = PassManager(["const_input_shape"]).run(
        pyipu.Converter(input_shape={"D": [4, 2]}, skip_passes=["int64_to_int32"]).convert(m)
    )
    assert_same_function(m, fixed, feeds)


# --- fuse_bn_into_conv / fuse_activation ---------------------------------------------------------


def test_fuse_bn_into_conv():
    c = 4
    m = make_model(
        [
            helper.make_node("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["n"]),
            helper.make_node("Conv", ["n", "W2"], ["c2"]),
            helper.make_node("BatchNormalization", ["c2", "g", "b", "mu", "var"], ["Y"]),
        ],
        [vi("X", 1, [1, 3, 6, 6])],
        [vi("Y", 1, [1, c, 6, 6])],
        [
            init("W", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
            init("B", rng.standard_normal(c).astype(np.float32)),
            init("W2", rng.standard_normal((c, c, 1, 1)).astype(np.float32)),
            init("g", rng.uniform(0.5, 1.5, c).astype(np.float32)),
            init("b", rng.standard_normal(c).astype(np.float32)),
            init("mu", rng.standard_normal(c).astype(np.float32)),
            init("var", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        ],
    )
    out = apply(["fuse_bn_into_conv"], m)
    assert ops(m) == {"Conv": 2, "BatchNormalization": 2}
    assert ops(out) == {"Conv": 2}
    assert [len(n.input) for n in out.graph.node] == [3, 3]
    feeds = {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    assert_same_function(m, out, feeds, rtol=1e-4, atol=1e-4)


def test_fuse_activation_merges_clamps_and_hard_swish():
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["a"]),
            helper.make_node("Clip", ["a", "", "six"], ["b"]),  # Relu6 as two ops
            helper.make_node("Max", ["X", "zero"], ["c"]),  # Relu as Max(x, 0)
            helper.make_node("Relu", ["c"], ["d"]),
            helper.make_node("Min", ["d", "six"], ["e"]),
            helper.make_node("HardSigmoid", ["X"], ["h"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["X", "h"], ["f"]),
            helper.make_node("Add", ["b", "e"], ["g"]),
            helper.make_node("Add", ["g", "f"], ["Y"]),
        ],
        [vi("X", 1, [2, 8])],
        [vi("Y", 1, [2, 8])],
        [init("six", np.float32(6)), init("zero", np.float32(0))],
        opset=14,
    )
    out = apply(["fuse_activation"], m)
    assert ops(m) == {"Relu": 2, "Clip": 1, "Max": 1, "Min": 1, "HardSigmoid": 1, "Mul": 1,
                      "Add": 2}  # fmt: skip
    assert ops(out) == {"Clip": 2, "HardSwish": 1, "Add": 2}
    feeds = {"X": (rng.standard_normal((2, 8)) * 5).astype(np.float32)}
    assert_same_function(m, out, feeds)


def test_fuse_activation_leaves_shared_intermediates():
    m = make_model(
        [helper.make_node("Relu", ["X"], ["a"]), helper.make_node("Relu", ["a"], ["Y"])],
        [vi("X", 1, [3])],
        [vi("Y", 1, [3]), vi("a", 1, [3])],
    )
    assert ops(apply(["fuse_activation"], m)) == {"Relu": 2}


# --- model_overview ------------------------------------------------------------------------------


def test_model_overview_reports_and_leaves_the_model_alone():
    m = _softmax_model()
    stream = io.StringIO()
    p = Pass.get_pass("model_overview", stream=stream)
    out = PassManager([p]).run(m)
    assert out == m
    ov = p.overview
    assert ov.op_counts == {"MatMul": 1, "Mul": 1, "Softmax": 1}
    assert ov.num_params == 33 and ov.param_bytes == 132
    assert ov.inputs == [("X", "float", [2, 8])] and ov.outputs == [("Y", "float", [2, 4])]
    text = stream.getvalue()
    assert "params: 33" in text and "Softmax" in text and "input  X: float [2, 8]" in text


def test_import_pyipu_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, pyipu; print('onnx' in sys.modules); "
        "pyipu.Converter; print('onnx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_eliminate_nop_dropout_is_onnxoptimizers_name():
    assert issubclass(
        pyipu.get_registered_passes()["eliminate_nop_dropout"],
        pyipu.get_registered_passes()["eliminate_dropout"],
    )


def test_fuse_matmul_add_bias_into_gemm():
    m = make_model(
        [
            helper.make_node("MatMul", ["X", "W"], ["a"]),
            helper.make_node("Add", ["bias", "a"], ["b"]),
            helper.make_node("MatMul", ["X3", "W"], ["c"]),  # 3-D A: Gemm cannot take it
            helper.make_node("Add", ["c", "bias"], ["d"]),
            helper.make_node("MatMul", ["b", "W2"], ["e"]),
            helper.make_node("Add", ["e", "full"], ["Y"]),  # C of shape [M, N]
        ],
        [vi("X", 1, [2, 4]), vi("X3", 1, [3, 2, 4])],
        [vi("Y", 1, [2, 5]), vi("d", 1, [3, 2, 3])],
        [
            init("W", rng.standard_normal((4, 3)).astype(np.float32)),
            init("bias", rng.standard_normal(3).astype(np.float32)),
            init("W2", rng.standard_normal((3, 5)).astype(np.float32)),
            init("full", rng.standard_normal((2, 5)).astype(np.float32)),
        ],
    )
    out = apply(["fuse_matmul_add_bias_into_gemm"], m)
    assert ops(m) == {"MatMul": 3, "Add": 3}
    assert ops(out) == {"Gemm": 2, "MatMul": 1, "Add": 1}
    feeds = {
        "X": rng.standard_normal((2, 4)).astype(np.float32),
        "X3": rng.standard_normal((3, 2, 4)).astype(np.float32),
    }
    assert_same_function(m, out, feeds, rtol=1e-5, atol=1e-5)
