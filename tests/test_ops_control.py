"""If and Scan inlined into the program: compile-time and run-time conditions, unrolled scans;
C runtime against the NumPy reference and onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from models import assert_matches_reference, expected, run_c
from onnx import TensorProto, helper

from pyipu.compiler import Compiler, UnsupportedAttributeError
from pyipu.enums import Op

F = TensorProto.FLOAT


def _branch(name: str, op: str, const: float) -> object:
    c = helper.make_tensor(f"{name}_c", F, [], [const])
    return helper.make_graph(
        [helper.make_node(op, ["x", f"{name}_c"], [f"{name}_y"])],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_y", F, [2, 3])],
        [c],
    )


def _if_model(cond_input: bool, opset: int = 13) -> object:
    node = helper.make_node(
        "If",
        ["cond"],
        ["y"],
        then_branch=_branch("then", "Add", 10.0),
        else_branch=_branch("else", "Mul", -2.0),
    )
    inputs = [helper.make_tensor_value_info("x", F, [2, 3])]
    inits = []
    if cond_input:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    else:
        inits.append(helper.make_tensor("cond", TensorProto.BOOL, [], [False]))
    g = helper.make_graph(
        [node], "m", inputs, [helper.make_tensor_value_info("y", F, [2, 3])], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: object, feeds: dict[str, np.ndarray]) -> object:
    exe = Compiler.compile(model)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    want = expected(model, feeds)  # onnxruntime (onnx.reference lacks reverse scans)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-6, err_msg=name)
    return exe


def test_if_with_a_compile_time_condition_inlines_one_branch() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    exe = _check(_if_model(cond_input=False), {"x": x})
    ops = [i.op for i in exe.program.program(exe.program.main_programs[0]).instrs]
    assert Op.WHERE not in ops and Op.MUL in ops and Op.ADD not in ops


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_run_time_condition_selects(cond: bool) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    exe = _check(_if_model(cond_input=True), {"x": x, "cond": np.array(cond)})
    ops = [i.op for i in exe.program.program(exe.program.main_programs[0]).instrs]
    assert Op.WHERE in ops


def test_if_branches_with_different_shapes_need_a_constant_condition() -> None:
    model = _if_model(cond_input=True)
    model.graph.node[0].attribute[0].g.output[0].type.tensor_type.shape.dim[0].dim_value = 2
    eb = model.graph.node[0].attribute[0].g  # make the else branch broadcast to another shape
    eb.initializer[0].CopyFrom(helper.make_tensor("else_c", F, [4, 1, 1], [1.0] * 4))
    with pytest.raises(UnsupportedAttributeError, match="equal shapes"):
        Compiler.compile(model)


def _scan_model(reverse: int = 0, out_axis: int = 0) -> object:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("s_in", F, [2]),
            helper.make_tensor_value_info("x_t", F, [2]),
        ],
        [
            helper.make_tensor_value_info("s_out", F, [2]),
            helper.make_tensor_value_info("y_t", F, [2]),
        ],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "xs"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[reverse],
        scan_output_axes=[out_axis],
    )
    g = helper.make_graph(
        [node],
        "m",
        [
            helper.make_tensor_value_info("s0", F, [2]),
            helper.make_tensor_value_info("xs", F, [4, 2]),
        ],
        [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("ys", F, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize(("reverse", "out_axis"), [(0, 0), (1, 0), (0, 1)])
def test_scan_is_unrolled(reverse: int, out_axis: int) -> None:
    feeds = {
        "s0": np.array([1.0, -1.0], np.float32),
        "xs": np.arange(8, dtype=np.float32).reshape(4, 2) / 4,
    }
    exe = _check(_scan_model(reverse, out_axis), feeds)
    ops = [i.op for i in exe.program.program(exe.program.main_programs[0]).instrs]
    assert ops.count(Op.GATHER) == 4 and Op.CONCAT in ops
