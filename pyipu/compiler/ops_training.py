"""The optimizer ops of the `ai.onnx.preview.training` domain (opset 1): Adagrad, Momentum
(standard and Nesterov) and Adam.

Each node updates several tensors at once: its inputs are R (the learning rate, a float
scalar), T (the update count, an int64 scalar), then the tensors X_1..X_n, their gradients
G_1..G_n and each state in turn (Adagrad: H; Momentum: V; Adam: V then H), n of each; its
outputs the new X_1..X_n then each new state, n of each. The update of each tensor is
written as the element-wise ONNX nodes of the operator's specification (at BODY_OPSET), which
are lowered like any others, so the optimizers run on the existing element-wise kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper, numpy_helper

from pyipu.compiler.errors import UnsupportedError
from pyipu.compiler.ir import np_dtype
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import REGISTRY, register
from pyipu.enums import DType

DOMAIN = "ai.onnx.preview.training"
BODY_OPSET = 13  # the opset the expanded nodes are written at
SPEC_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64})  # float64 runs as float32 (backend.py)
STATES = {"Adagrad": ("H",), "Momentum": ("V",), "Adam": ("V", "H")}


class _Body:
    """The nodes one optimizer node expands to, named after it."""

    def __init__(self, n: Node, dtype: DType) -> None:
        self.n = n
        self.dtype = dtype
        self.prefix = f"{n.proto.name or n.op_type}:{n.outputs[0]}:"
        self.count = 0
        self.scalars: dict[tuple[int, bool], str] = {}

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        self.count += 1
        name = out or f"{self.prefix}{op_type}{self.count}"
        node = helper.make_node(op_type, list(inputs), [name], name=name, **attrs)
        self.n.low.lower_node(node, REGISTRY, BODY_OPSET)
        return name

    def const(self, value: float) -> str:
        array = np.asarray(value, np_dtype(self.dtype))
        return self.op("Constant", value=numpy_helper.from_array(array))

    def scalar(self, i: int, cast: bool = True) -> str:
        """Input i (R or T) as a scalar (shape []), of the tensors' dtype when `cast`."""
        if (i, cast) in self.scalars:
            return self.scalars[i, cast]
        name = self.n.inputs[i]
        if self.n.shape(i):
            name = self.op("Squeeze", name)
        if cast and self.n.dtype(i) != self.dtype:
            name = self.op("Cast", name, to=int(self.dtype))
        self.scalars[i, cast] = name
        return name

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", a, b)

    def add(self, a: str, b: str) -> str:
        return self.op("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.op("Sub", a, b)

    def started(self) -> str:
        """T > 0, a bool scalar."""
        zero = self.op("Constant", value=numpy_helper.from_array(np.array(0, np.int64)))
        return self.op("Greater", self.scalar(1, cast=False), zero)


Update = Callable[[Node, _Body, str, str, list[str], list[str]], None]


def _check(n: Node) -> tuple[int, DType]:
    """The number of tensors the node updates and their dtype; every count, shape and dtype
    checked against the operator's specification."""
    imported = {o.domain: o.version for o in n.low.graph.model.opset_import}
    if imported.get(DOMAIN, 1) != 1:
        raise UnsupportedError(
            f"{n.label}: {DOMAIN} opset {imported[DOMAIN]} is not supported (only 1)"
        )
    states = len(STATES[n.op_type])
    per = 2 + states  # X, G and the states of one tensor
    count = (len(n.inputs) - 2) // per
    if len(n.inputs) < 2 + per or (len(n.inputs) - 2) % per:
        n.fail(
            f"takes R, T and {per} inputs per tensor (X, G, {', '.join(STATES[n.op_type])}), "
            f"got {len(n.inputs)} inputs"
        )
    if len(n.outputs) != count * (1 + states):
        n.fail(f"updates {count} tensors: {count * (1 + states)} outputs, got {len(n.outputs)}")
    if any(not n.has_input(i) for i in range(len(n.inputs))):
        n.fail("every input is required")
    for i in (0, 1):
        if n.shape(i) not in ((), (1,)):
            n.shape_error(f"input {i} ({'RT'[i]}) must be a scalar, got {list(n.shape(i))}")
    n.check_dtype(SPEC_DTYPES, 0)
    n.check_dtype(frozenset({DType.INT64}), 1)
    dtype = n.check_dtype(SPEC_DTYPES, *range(2, len(n.inputs)))
    for k in range(count):
        x = 2 + k
        for j in range(1, per):
            i = x + j * count
            if n.shape(i) != n.shape(x):
                n.shape_error(
                    f"input {i} ({n.inputs[i]!r}) has shape {list(n.shape(i))}, the tensor it "
                    f"belongs to ({n.inputs[x]!r}) {list(n.shape(x))}"
                )
    return count, dtype


def _lower(update: Update) -> Callable[[Node], None]:
    def lower(n: Node) -> None:
        count, dtype = _check(n)
        body = _Body(n, dtype)
        states = len(STATES[n.op_type])
        for k in range(count):
            x, g = n.inputs[2 + k], n.inputs[2 + count + k]
            state = [n.inputs[2 + (2 + j) * count + k] for j in range(states)]
            outs = [n.outputs[k + j * count] for j in range(1 + states)]
            update(n, body, x, g, state, outs)

    return lower


def _regularized(n: Node, b: _Body, x: str, g: str) -> str:
    """G + norm_coefficient·X: the gradient of ½·norm_coefficient·‖X‖² added."""
    norm = float(n.attr("norm_coefficient", 0.0))
    return b.add(b.mul(b.const(norm), x), g) if norm else g


def _adagrad(n: Node, b: _Body, x: str, g: str, state: list[str], outs: list[str]) -> None:
    decay, eps = float(n.attr("decay_factor", 0.0)), float(n.attr("epsilon", 1e-6))
    # r = R / (1 + T·decay_factor)
    steps = b.scalar(1)
    r = b.op("Div", b.scalar(0), b.add(b.const(1.0), b.mul(steps, b.const(decay))))
    gr = _regularized(n, b, x, g)
    h_new = b.op("Add", state[0], b.mul(gr, gr), out=outs[1])
    adaptive = b.add(b.op("Sqrt", h_new), b.const(eps))
    b.op("Sub", x, b.op("Div", b.mul(r, gr), adaptive), out=outs[0])


def _momentum(n: Node, b: _Body, x: str, g: str, state: list[str], outs: list[str]) -> None:
    mode = n.attr("mode")
    if mode not in ("standard", "nesterov"):
        n.fail(f"mode {mode!r} is neither 'standard' nor 'nesterov'")
    alpha, beta = float(n.attr("alpha")), float(n.attr("beta"))
    gr = _regularized(n, b, x, g)
    # beta applies from the second update on (T > 0)
    beta_now = b.op("Where", b.started(), b.const(beta), b.const(1.0))
    v_new = b.op("Add", b.mul(b.const(alpha), state[0]), b.mul(beta_now, gr), out=outs[1])
    step = v_new if mode == "standard" else b.add(gr, b.mul(b.const(alpha), v_new))
    b.op("Sub", x, b.mul(b.scalar(0), step), out=outs[0])


def _adam(n: Node, b: _Body, x: str, g: str, state: list[str], outs: list[str]) -> None:
    alpha, beta = float(n.attr("alpha", 0.9)), float(n.attr("beta", 0.999))
    eps = float(n.attr("epsilon", 1e-6))
    post = float(n.attr("norm_coefficient_post", 0.0))
    gr = _regularized(n, b, x, g)
    v, h = state
    v_new = b.op("Add", b.mul(b.const(alpha), v), b.mul(b.const(1 - alpha), gr), out=outs[1])
    h_new = b.op(
        "Add", b.mul(b.const(beta), h), b.mul(b.const(1 - beta), b.mul(gr, gr)), out=outs[2]
    )
    h_sqrt = b.add(b.op("Sqrt", h_new), b.const(eps))
    # bias correction from the second update on: R·√(1 − beta^T) / (1 − alpha^T)
    r = b.scalar(0)
    steps = b.scalar(1)
    one = b.const(1.0)
    corrected = b.op(
        "Div",
        b.mul(r, b.op("Sqrt", b.sub(one, b.op("Pow", b.const(beta), steps)))),
        b.sub(one, b.op("Pow", b.const(alpha), steps)),
    )
    r_adj = b.op("Where", b.started(), corrected, r)
    moved = b.sub(x, b.mul(r_adj, b.op("Div", v_new, h_sqrt)))
    if post:
        b.op("Mul", b.const(1 - post), moved, out=outs[0])
    else:
        b.op("Identity", moved, out=outs[0])


for _op, _fn in (("Adagrad", _adagrad), ("Momentum", _momentum), ("Adam", _adam)):
    register(_op, 1, domain=DOMAIN)(_lower(_fn))
