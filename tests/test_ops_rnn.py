"""RNN, GRU and LSTM unrolled into GEMM / GATHER / UNARY / CONCAT: every output (Y, Y_h, Y_c) of
the C runtime against the NumPy reference, and the reference against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from models import F32, arr, assert_matches_reference, expected, feeds_of, run_c, single_node
from onnx.reference import ReferenceEvaluator

from pyipu.compiler import Compiler, UnsupportedAttributeError

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(
    kind: str, seq: int, batch: int, isz: int, hidden: int, dirs: int, layout: int, extras: bool
) -> tuple[list[np.ndarray], dict[int, Any]]:
    g = GATES[kind]
    x = arr((batch, seq, isz) if layout else (seq, batch, isz), F32, 1, low=-1, high=1)
    w = arr((dirs, g * hidden, isz), F32, 2, low=-0.5, high=0.5)
    r = arr((dirs, g * hidden, hidden), F32, 3, low=-0.5, high=0.5)
    ins = [x, w, r]
    if extras:
        hshape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        ins += [arr((dirs, 2 * g * hidden), F32, 4, low=-0.2, high=0.2)]
        consts = {4: np.full((batch,), seq, np.int32)}  # sequence_lens: every sequence full
        ins += [arr(hshape, F32, 5, low=-0.5, high=0.5)]
        if kind == "LSTM":
            ins += [arr(hshape, F32, 6, low=-0.5, high=0.5), arr((dirs, 3 * hidden), F32, 7)]
        return ins, consts
    return ins, {}


CASES = [
    ("RNN", "forward", 0, False, {}),
    ("RNN", "bidirectional", 0, True, {"activations": ["Relu", "Tanh"]}),
    ("GRU", "forward", 0, True, {}),
    ("GRU", "reverse", 0, True, {"linear_before_reset": 1}),
    ("GRU", "bidirectional", 0, False, {"clip": 0.7}),
    ("GRU", "bidirectional", 1, True, {}),
    ("LSTM", "forward", 0, False, {}),
    ("LSTM", "bidirectional", 0, True, {}),  # peepholes, initial c/h, biases
    ("LSTM", "reverse", 1, True, {}),  # onnx.reference ignores activations: defaults here
    (
        "LSTM",
        "reverse",
        0,
        True,
        {
            "activations": ["HardSigmoid", "Tanh", "Tanh"],
            "activation_alpha": [0.3],
            "activation_beta": [0.4],
        },
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_recurrent(case: int) -> None:
    kind, direction, layout, extras, attrs = CASES[case]
    dirs = 2 if direction == "bidirectional" else 1
    seq, batch, isz, hidden = 4, 3, 5, 6
    ins, consts = _inputs(kind, seq, batch, isz, hidden, dirs, layout, extras)
    attrs = {"hidden_size": hidden, "direction": direction, **attrs}
    if layout:
        attrs["layout"] = 1
    outs = 3 if kind == "LSTM" else 2
    model = single_node(kind, ins, attrs, opset=14, const_inputs=consts, num_outputs=outs)
    feeds = feeds_of(model, ins)
    exe = Compiler.compile(model)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    if layout:  # onnxruntime has no batch-first recurrences: onnx.reference checks those
        names = [o.name for o in model.graph.output]
        want = dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))
    else:
        want = expected(model, feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_short_sequence_lens_are_a_compile_error() -> None:
    ins, _ = _inputs("RNN", 3, 2, 4, 5, 1, 0, False)
    model = single_node(
        "RNN",
        ins,
        {"hidden_size": 5},
        opset=14,
        const_inputs={3: None, 4: np.array([3, 1], np.int32)},
    )
    with pytest.raises(UnsupportedAttributeError, match="sequence_lens"):
        Compiler.compile(model)
