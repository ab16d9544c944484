"""RNN, GRU and LSTM, unrolled over their static sequence length (see ops.py).

Per direction and gate, the input projection of every time step is one GEMM over the whole
sequence (X·Wᵀ + Wb + Rb); each step then adds H·Rᵀ with a GEMM whose C operand is that step's
projection (read with GATHER), applies the gate activations and combines the gates. Y stacks the
per-step hidden states with one CONCAT. Weights may be constants or run-time inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pyipu.compiler.ir import FLOAT_DTYPES, f64_bits
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import DType, Op, UnaryFn

# activation name -> (UNARY function or None for RELU, default alpha, default beta)
_ACTIVATIONS = {
    "Sigmoid": (UnaryFn.SIGMOID, None, None),
    "Tanh": (UnaryFn.TANH, None, None),
    "Relu": (None, None, None),
    "LeakyRelu": (UnaryFn.LEAKY_RELU, 0.01, None),
    "HardSigmoid": (UnaryFn.HARD_SIGMOID, 0.2, 0.5),
    "Elu": (UnaryFn.ELU, 1.0, None),
    "Softplus": (UnaryFn.SOFTPLUS, None, None),
}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


class _Cell:
    """Emit helpers for one RNN node: element-wise math on [batch, hidden] tensors."""

    def __init__(self, n: Node, dt: DType, batch: int, hidden: int) -> None:
        self.n, self.dt, self.shape = n, dt, (batch, hidden)
        self.count = 0
        kind = n.op_type
        names = [
            a.decode() if isinstance(a, bytes) else str(a) for a in n.attr("activations") or []
        ]
        dirs = 2 if n.attr("direction", "forward") == "bidirectional" else 1
        per_dir = len(_DEFAULTS[kind])
        if not names:
            names = _DEFAULTS[kind] * dirs
        if len(names) != per_dir * dirs:
            n.fail(f"activations {names} must list {per_dir * dirs} functions")
        alphas = list(n.attr("activation_alpha") or [])
        betas = list(n.attr("activation_beta") or [])
        self.acts: list[tuple[str, float | None, float | None]] = []
        for name in names:
            if name not in _ACTIVATIONS:
                n.fail(f"activation {name!r} is not supported (supported: {sorted(_ACTIVATIONS)})")
            _, da, db = _ACTIVATIONS[name]
            a = alphas.pop(0) if da is not None and alphas else da
            b = betas.pop(0) if db is not None and betas else db
            self.acts.append((name, a, b))
        self.per_dir = per_dir
        clip = n.attr("clip")
        self.clip = None if clip is None else float(clip)

    def tmp(self, op: Op, ins: Sequence[int], attrs: Sequence[int] = (), shape=None) -> int:  # noqa: ANN001
        self.count += 1
        return self.n.emit_temp(op, ins, shape or self.shape, self.dt, attrs, f":r{self.count}")

    def act(self, d: int, k: int, x: int) -> int:
        """Activation k (0: f, 1: g, 2: h) of direction d, after the optional clip."""
        if self.clip is not None:
            c = self.clip
            x = self.tmp(Op.UNARY, [x], [int(UnaryFn.CLIP), f64_bits(-c), f64_bits(c)])
        name, a, b = self.acts[d * self.per_dir + k]
        fn = _ACTIVATIONS[name][0]
        if fn is None:
            return self.tmp(Op.RELU, [x])
        return self.tmp(Op.UNARY, [x], [int(fn), f64_bits(a or 0.0), f64_bits(b or 0.0)])


def _pick(
    n: Node, i: int, index: int, rows: int | None = None, start: int = 0, axis: int = 0
) -> int:
    """Input i's slice [index] along `axis` (0 or 1), then (optionally) rows [start, start+rows)
    of it."""
    src = n.shape(i)
    b = n.low.b
    name = f"{n.outputs[0] or n.op_type}:{n.inputs[i]}"
    idx = b.weight(f"{name}:i{index}", np.array(index, np.int64), n.low.subgraph)
    outer, inner = math.prod(src[:axis]), math.prod(src[axis + 1 :])
    t = n.emit_temp(
        Op.GATHER,
        [n.input(i), idx],
        (*src[:axis], *src[axis + 1 :]),
        n.dtype(i),
        [outer, src[axis], inner],
        f":{n.inputs[i]}{index}",
    )
    if rows is None:
        return t
    sel = b.weight(
        f"{name}:rows{start}_{rows}", np.arange(start, start + rows, dtype=np.int64), n.low.subgraph
    )
    rest = math.prod(src[2:])
    return n.emit_temp(
        Op.GATHER,
        [t, sel],
        (rows, *src[2:]),
        n.dtype(i),
        [1, src[1], rest],
        f":{n.inputs[i]}{index}r{start}",
    )


def _lower(n: Node) -> None:
    kind = n.op_type
    dt = n.check_dtype(FLOAT_DTYPES, 0, 1, 2)
    layout = int(n.attr("layout", 0))
    xs = n.shape(0)
    if len(xs) != 3:
        n.shape_error(f"X shape {list(xs)} must be 3-D")
    seq, batch, isz = (xs[1], xs[0], xs[2]) if layout else xs
    direction = n.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        n.fail(f"direction {direction!r} is not supported")
    dirs = 2 if direction == "bidirectional" else 1
    gates = _GATES[kind]
    hidden = int(n.attr("hidden_size", n.shape(1)[1] // gates))
    if n.shape(1) != (dirs, gates * hidden, isz) or n.shape(2) != (dirs, gates * hidden, hidden):
        n.shape_error(f"W {list(n.shape(1))} / R {list(n.shape(2))} do not fit X {list(xs)}")
    if n.has_input(4):
        lens = np.asarray(n.const(4, "sequence_lens"))
        if not np.all(lens == seq):
            n.fail(f"sequence_lens {lens.tolist()} shorter than the sequence are not supported")
    if kind == "LSTM" and n.attr("input_forget", 0):
        n.fail("input_forget=1 is not supported")
    if seq * dirs > 255:
        n.fail(f"{seq} steps x {dirs} directions: Y is stacked by one CONCAT (at most 255)")
    cell = _Cell(n, dt, batch, hidden)
    b = n.low.b
    name = n.outputs[0] or kind
    x = n.input(0)
    if layout:
        x = n.emit_temp(Op.TRANSPOSE, [x], (seq, batch, isz), dt, [1, 0, 2], ":seqfirst")
    x2 = b.view(x, (seq * batch, isz), f"{name}:x2d")
    npdt = np.float16 if dt == DType.FLOAT16 else np.float32
    zeros = b.weight(f"{name}:zeros", np.zeros((batch, hidden), npdt), n.low.subgraph)
    lbr = kind == "GRU" and bool(n.attr("linear_before_reset", 0))
    ys: list[list[int]] = [[0] * dirs for _ in range(seq)]
    finals_h, finals_c = [], []
    for d in range(dirs):
        w = [_pick(n, 1, d, hidden, g * hidden) for g in range(gates)]
        r = [_pick(n, 2, d, hidden, g * hidden) for g in range(gates)]
        wb: list[int | None] = [None] * gates
        rb: list[int | None] = [None] * gates
        if n.has_input(3):
            bd = _pick(n, 3, d)
            bd = b.view(bd, (2 * gates * hidden, 1), f"{name}:b{d}")
            for g in range(gates):
                cols = [
                    b.weight(
                        f"{name}:bsel{k}_{g}",
                        np.arange(
                            (k * gates + g) * hidden, (k * gates + g + 1) * hidden, dtype=np.int64
                        ),
                        n.low.subgraph,
                    )
                    for k in (0, 1)
                ]
                wb[g], rb[g] = (
                    n.emit_temp(
                        Op.GATHER,
                        [bd, c],
                        (hidden,),
                        dt,
                        [1, 2 * gates * hidden, 1],
                        f":b{d}{k}{g}",
                    )
                    for k, c in enumerate(cols)
                )
        proj = []
        for g in range(gates):
            bias, rbias = wb[g], rb[g]
            # GRU lbr keeps Rbh inside the reset
            if bias is not None and rbias is not None and not (lbr and g == 2):
                bias = cell.tmp(Op.ADD, [bias, rbias], shape=(hidden,))
            ins = [x2, w[g]] + ([bias] if bias is not None else [])
            p = cell.tmp(Op.GEMM, ins, [0, 1, f64_bits(1.0), f64_bits(1.0)], (seq * batch, hidden))
            proj.append(b.view(p, (seq, batch * hidden), f"{name}:proj{d}{g}"))
        h = _pick(n, 5, d, axis=layout) if n.has_input(5) else zeros  # layout 1: [B, dirs, H]
        c = (_pick(n, 6, d, axis=layout) if n.has_input(6) else zeros) if kind == "LSTM" else None
        peep = (
            [_pick(n, 7, d, None) for _ in (0,)][0] if kind == "LSTM" and n.has_input(7) else None
        )
        order = range(seq - 1, -1, -1) if (direction == "reverse" or d == 1) else range(seq)
        for t in order:
            idx = b.weight(f"{name}:t{t}", np.array(t, np.int64), n.low.subgraph)

            # (both helpers are only called within this iteration)
            def step_in(g: int) -> int:
                xt = cell.tmp(
                    Op.GATHER,
                    [proj[g], idx],  # noqa: B023
                    [1, seq, batch * hidden],
                    (batch * hidden,),
                )
                return b.view(xt, (batch, hidden), f"{name}:xt{d}{t}{g}")  # noqa: B023

            def hr(g: int, hh: int, add: int) -> int:
                ins = [hh, r[g], add]  # noqa: B023
                return cell.tmp(Op.GEMM, ins, [0, 1, f64_bits(1.0), f64_bits(1.0)])

            if kind == "RNN":
                h = cell.act(d, 0, hr(0, h, step_in(0)))
            elif kind == "GRU":
                z = cell.act(d, 0, hr(0, h, step_in(0)))
                rr = cell.act(d, 0, hr(1, h, step_in(1)))
                if lbr:
                    rh = hr(2, h, rb[2] if rb[2] is not None else zeros)
                    pre = cell.tmp(Op.ADD, [step_in(2), cell.tmp(Op.MUL, [rr, rh])])
                else:
                    pre = hr(2, cell.tmp(Op.MUL, [rr, h]), step_in(2))
                hh = cell.act(d, 1, pre)
                # H = (1 - z) * hh + z * H = hh + z * (H - hh)
                h = cell.tmp(Op.ADD, [hh, cell.tmp(Op.MUL, [z, cell.tmp(Op.SUB, [h, hh])])])
            else:
                assert c is not None  # LSTM: the cell state
                gate_in = [hr(g, h, step_in(g)) for g in range(4)]  # i, o, f, c
                if peep is not None:
                    pv = [
                        b.view(
                            cell.tmp(
                                Op.GATHER,
                                [
                                    peep,
                                    b.weight(
                                        f"{name}:p{k}",
                                        np.arange(k * hidden, (k + 1) * hidden, dtype=np.int64),
                                        n.low.subgraph,
                                    ),
                                ],
                                [1, 3 * hidden, 1],
                                (hidden,),
                            ),
                            (hidden,),
                            f"{name}:pv{d}{t}{k}",
                        )
                        for k in range(3)
                    ]
                    gate_in[0] = cell.tmp(Op.ADD, [gate_in[0], cell.tmp(Op.MUL, [pv[0], c])])
                    gate_in[2] = cell.tmp(Op.ADD, [gate_in[2], cell.tmp(Op.MUL, [pv[2], c])])
                i_g, f_g = cell.act(d, 0, gate_in[0]), cell.act(d, 0, gate_in[2])
                c_g = cell.act(d, 1, gate_in[3])
                c = cell.tmp(Op.ADD, [cell.tmp(Op.MUL, [f_g, c]), cell.tmp(Op.MUL, [i_g, c_g])])
                if peep is not None:
                    gate_in[1] = cell.tmp(Op.ADD, [gate_in[1], cell.tmp(Op.MUL, [pv[1], c])])
                o_g = cell.act(d, 0, gate_in[1])
                h = cell.tmp(Op.MUL, [o_g, cell.act(d, 2, c)])
            ys[t][d] = h
        finals_h.append(h)
        finals_c.append(c)
    _outputs(n, dt, ys, finals_h, finals_c, seq, dirs, batch, hidden, layout)


def _stack(n: Node, parts: list[int], shape: tuple[int, ...], out: int, tag: str) -> int:
    """CONCAT of equally shaped tensors along a new leading dim (a view when there is one)."""
    b = n.low.b
    flat = math.prod(shape[1:])
    views = [
        b.view(p, (1, flat), f"{n.outputs[0] or n.op_type}:{tag}{i}") for i, p in enumerate(parts)
    ]
    if len(views) == 1:
        return b.view(views[0], shape, f"{n.outputs[0] or n.op_type}:{tag}")
    dt = b.tensors[parts[0]].dtype
    return n.emit_temp(Op.CONCAT, views, (shape[0], flat), dt, [0], f":{tag}")


def _outputs(n, dt, ys, finals_h, finals_c, seq, dirs, batch, hidden, layout) -> None:  # noqa: ANN001, PLR0913
    b = n.low.b
    results: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
    if len(n.outputs) > 0 and n.outputs[0]:
        y = _stack(n, [h for row in ys for h in row], (seq * dirs, batch, hidden), 0, "Y")
        results.append((0, y, (seq, dirs, batch, hidden), (2, 0, 1, 3)))
    for k, finals in ((1, finals_h), (2, finals_c)):
        if len(n.outputs) > k and n.outputs[k]:
            y = _stack(n, finals, (dirs, batch, hidden), k, f"Y{k}")
            results.append((k, y, (dirs, batch, hidden), (1, 0, 2)))
    for k, t, shape, perm in results:
        t = b.view(t, shape, f"{n.outputs[k]}:stacked")
        if layout:
            n.emit(Op.TRANSPOSE, [t], [shape[p] for p in perm], dt, list(perm), out=k)
        else:
            n.set_view(t, shape, k)


register("RNN", 7, 14)(_lower)
register("GRU", 7, 14)(_lower)
register("LSTM", 7, 14)(_lower)
