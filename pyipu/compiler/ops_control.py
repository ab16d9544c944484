"""Control flow on a static-shape machine: If and Scan lowered by inlining their bodies.

IPU programs have no data-dependent shapes, so a body is lowered into the enclosing program
with its own names prefixed (sibling bodies may reuse names). `If` with a compile-time condition
inlines one branch; with a run-time condition it computes both branches and selects each output
with WHERE (both branches must give the same shape and dtype: the fusion-branch case). `Scan`
has a static trip count (its scan inputs' length) and is unrolled: each iteration reads its slice
with GATHER and the per-iteration outputs are stacked with CONCAT.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from pyipu.compiler.functions import rename_outer_refs
from pyipu.compiler.ir import ALL_DTYPES, dtype_of
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import REGISTRY, _broadcast, register
from pyipu.enums import DType, Op

Value = int | np.ndarray  # a tensor index, or a compile-time constant


def _defined(g: onnx.GraphProto) -> set[str]:
    names = {i.name for i in g.input} | {i.name for i in g.initializer}
    for node in g.node:
        names.update(o for o in node.output if o)
    return names


def _renamed(node: onnx.NodeProto, rename: dict[str, str], prefix: str) -> onnx.NodeProto:
    """A copy of `node` with body-defined names renamed; nested bodies see the renames too."""
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = prefix + (node.name or node.op_type)
    out.input[:] = [rename.get(i, i) for i in node.input]
    out.output[:] = [rename.get(o, o) for o in node.output]
    for a in out.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            rename_outer_refs(g, rename)
    return out


def inline_body(n: Node, g: onnx.GraphProto, inputs: list[Value], prefix: str) -> list[Value]:
    """Lower body `g` with its formal inputs bound to `inputs`; returns its outputs."""
    low = n.low
    rename = {name: prefix + name for name in _defined(g)}
    if len(inputs) != len(g.input):
        n.fail(f"body {g.name!r} takes {len(g.input)} inputs, got {len(inputs)}")
    for vi, v in zip(g.input, inputs, strict=True):
        if isinstance(v, np.ndarray):
            low.constants[rename[vi.name]] = v
        else:
            low.values[rename[vi.name]] = v
    for init in g.initializer:
        low.constants[rename[init.name]] = numpy_helper.to_array(init)
    for node in g.node:
        low.lower_node(_renamed(node, rename, prefix), REGISTRY, n.opset)
    results: list[Value] = []
    for o in g.output:
        name = rename.get(o.name, o.name)
        results.append(low.constants[name] if name in low.constants else low.tensor(name))
    return results


def _set_output(n: Node, i: int, v: Value) -> None:
    if isinstance(v, np.ndarray):
        n.set_const(v, i)
    else:
        n.set_view(v, n.low.b.tensors[v].shape, i)


def _tensor(n: Node, v: Value, tag: str) -> int:
    if isinstance(v, np.ndarray):
        return n.low.b.weight(f"{n.outputs[0]}:{tag}", v, n.low.subgraph)
    return v


def _spec(n: Node, v: Value) -> tuple[DType, tuple[int, ...]]:
    if isinstance(v, np.ndarray):
        return dtype_of(v.dtype), tuple(v.shape)
    t = n.low.b.tensors[v]
    return t.dtype, t.shape


@register("If", 1)
def If(n: Node) -> None:  # noqa: N802
    then_g, else_g = n.attr("then_branch"), n.attr("else_branch")
    name = n.outputs[0] or n.op_type
    if not len(then_g.output) == len(else_g.output) == len(n.outputs):
        n.fail(
            f"then_branch has {len(then_g.output)} outputs, else_branch {len(else_g.output)}, "
            f"the node {len(n.outputs)}: they must be equal"
        )
    if n.inputs[0] in n.low.constants:
        cond = bool(np.asarray(n.low.constants[n.inputs[0]]).reshape(-1)[0])
        outs = inline_body(n, then_g if cond else else_g, [], f"{name}:{cond}:")
        for i, v in enumerate(outs):
            _set_output(n, i, v)
        return
    n.check_dtype(frozenset({DType.BOOL}), 0)
    if n.shape(0) not in ((), (1,)):
        n.shape_error(f"cond must have one element, got shape {list(n.shape(0))}")
    a = inline_body(n, then_g, [], f"{name}:then:")
    b = inline_body(n, else_g, [], f"{name}:else:")
    for i, (ta, tb) in enumerate(zip(a, b, strict=True)):
        (da, sa), (db, sb) = _spec(n, ta), _spec(n, tb)
        if da != db or sa != sb:
            n.fail(
                f"output {i}: the branches give {da.name.lower()}{list(sa)} and "
                f"{db.name.lower()}{list(sb)}; a run-time condition needs equal shapes and dtypes"
            )
        if da not in ALL_DTYPES:
            n.fail(f"output {i} has unsupported dtype {da.name.lower()}")
        ins = [n.input(0), _tensor(n, ta, f"then{i}"), _tensor(n, tb, f"else{i}")]
        n.emit(Op.WHERE, ins, _broadcast(n, n.shape(0), sa), da, out=i)


@register("Scan", 9)
def Scan(n: Node) -> None:  # noqa: N802
    body = n.attr("body")
    m = int(n.attr("num_scan_inputs"))
    states = len(n.inputs) - m
    k = len(body.output) - states
    if m < 1 or states < 0 or k < 0:
        n.fail(f"num_scan_inputs {m} does not fit {len(n.inputs)} inputs")
    in_axes = [int(a) for a in (n.attr("scan_input_axes") or [0] * m)]
    in_dirs = [int(d) for d in (n.attr("scan_input_directions") or [0] * m)]
    out_axes = [int(a) for a in (n.attr("scan_output_axes") or [0] * k)]
    out_dirs = [int(d) for d in (n.attr("scan_output_directions") or [0] * k)]
    xs = list(range(states, states + m))
    axes = [n.axis(a, len(n.shape(i))) for a, i in zip(in_axes, xs, strict=True)]
    lengths = {n.shape(i)[a] for a, i in zip(axes, xs, strict=True)}
    if len(lengths) != 1:
        n.shape_error(f"scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    if k and steps > 255:
        n.fail(f"{steps} iterations: scan outputs are stacked by one CONCAT (at most 255 inputs)")
    b = n.low.b
    name = n.outputs[0] or "scan"
    carried: list[Value] = [
        n.low.constants[n.inputs[i]] if n.inputs[i] in n.low.constants else n.input(i)
        for i in range(states)
    ]
    collected: list[list[Value]] = [[] for _ in range(k)]
    for t in range(steps):
        slices: list[Value] = []
        for j, (i, ax) in enumerate(zip(xs, axes, strict=True)):
            idx = steps - 1 - t if in_dirs[j] else t
            src = n.shape(i)
            index = b.weight(f"{name}:idx{idx}", np.array(idx, dtype=np.int64), n.low.subgraph)
            outer, inner = int(np.prod(src[:ax])), int(np.prod(src[ax + 1 :]))
            shape = (*src[:ax], *src[ax + 1 :])
            slices.append(
                n.emit_temp(
                    Op.GATHER,
                    [n.input(i), index],
                    shape,
                    n.dtype(i),
                    [outer, src[ax], inner],
                    f":it{t}:in{j}",
                )
            )
        outs = inline_body(n, body, [*carried, *slices], f"{name}:it{t}:")
        carried = outs[:states]
        for j in range(k):
            collected[j].append(outs[states + j])
    for i, v in enumerate(carried):
        _set_output(n, i, v)
    for j in range(k):
        items = collected[j][::-1] if out_dirs[j] else collected[j]
        dt, shape = _spec(n, items[0])
        ax = n.axis(out_axes[j], len(shape) + 1)
        one = (*shape[:ax], 1, *shape[ax:])
        parts = [
            b.view(_tensor(n, v, f"out{j}_{t}"), one, f"{name}:out{j}:{t}")
            for t, v in enumerate(items)
        ]
        full = (*shape[:ax], steps, *shape[ax:])
        if len(parts) == 1:
            n.set_view(parts[0], full, states + j)
        else:
            n.emit(Op.CONCAT, parts, full, dt, [ax], out=states + j)
