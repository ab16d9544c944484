"""`%ipu graph`: the compiled model as a graph of its ONNX nodes, drawn as inline SVG.

A box is a node whose instructions run (with the nodes fused into it), a grey pill a node that
costs nothing at run time (a zero-copy view, a buffer written in place); the box's colour is its
share of the estimated cycles. Edges follow the model's values. Below the drawing, a table of
every node: output shapes, how it was compiled, its instructions, cycles and bytes. Plain SVG
and HTML, so the picture survives export without a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyipu.compiler import sources
from pyipu.compiler.ipu_model.nodes import NodeCost

from . import html as H

BOX_W, BOX_H, PILL_H = 320, 42, 24
GAP_X, GAP_Y, MARGIN = 24, 26, 8
MAX_COLUMNS = 8  # a wider layer wraps onto the next row


@dataclass(frozen=True)
class _Unit:
    """One drawn item: a node that runs (`cost` with its fused nodes), a free node, or a graph
    input/output."""

    key: str
    title: str
    detail: str
    tooltip: str
    kind: str  # "run", "free", "io"
    share: float = 0.0  # of the most expensive node's cycles


@dataclass
class GraphResult:
    """`nodes`: every node's NodeCost (pyipu.compiler.ipu_model.nodes), in program order;
    `svg`: the drawing."""

    name: str
    nodes: tuple[NodeCost, ...] = field(repr=False)
    batch_cycles: int = 0
    svg: str = field(default="", repr=False)

    def _repr_html_(self) -> str:
        rows = [_row(n, self.batch_cycles) for n in self.nodes]
        run = sum(1 for n in self.nodes if n.role == sources.COMPUTED)
        head = (
            f"<b>Graph of {H.esc(self.name)}</b>: {len(self.nodes)} ONNX nodes, {run} with "
            f"instructions of their own, {self.batch_cycles:,} estimated cycles per batch"
        )
        table = H.table(
            (
                "node",
                "op",
                "output",
                "compiled as",
                "instructions",
                "cycles",
                "% of batch",
                "writes",
                "weights",
            ),
            rows,
            "ipu-graph-nodes",
        )
        return (
            f'<div class="ipu-graph">{head}'
            # the drawing keeps a light background of its own: readable under a dark theme
            f'<div style="max-height:640px;overflow:auto;background:#fff">{self.svg}</div>'
            f"<details><summary>every node</summary>{table}</details></div>"
        )


def graph(name: str, exe: Any) -> GraphResult:
    from IPython.core.error import UsageError

    from pyipu.compiler.ipu_model.nodes import node_costs

    report = exe.report()
    nodes = node_costs(exe.program, report)
    if nodes is None:
        raise UsageError(
            f"{name}: the executable carries no record of its ONNX graph (a PopEF file written "
            "by another tool); recompile the model with this pyipu"
        )
    return GraphResult(name, nodes, report.batch_cycles, svg(nodes, exe))


def _row(n: NodeCost, batch: int) -> tuple[Any, ...]:
    how = {
        sources.COMPUTED: "instructions" + (f" (+ {', '.join(n.fused)})" if n.fused else ""),
        sources.FUSED: f"fused into {n.done_by}" if n.done_by else "removed (result unused)",
        sources.VIEW: "view of its input (no copy)",
        sources.IN_PLACE: "written in place by its inputs",
        sources.FOLDED: "folded at compile time",
    }[n.role]
    ops = ", ".join(c.opcode.lower() for c in n.instructions)
    share = f"{n.cycles / batch:.1%}" if batch and n.instructions else ""
    return (
        n.name,
        n.op_type,
        "; ".join(s for s in n.shapes if s),
        how,
        ops,
        f"{n.cycles:,}" if n.instructions else "",
        share,
        H.size(n.output_bytes) if n.instructions else "",
        H.size(n.weight_bytes) if n.weight_bytes else "",
    )


def _units(nodes: tuple[NodeCost, ...], exe: Any) -> tuple[list[_Unit], list[tuple[str, str]]]:
    """The drawn items and the edges between them (by key)."""
    total = sum(n.cycles for n in nodes) or 1
    hottest = max((n.cycles for n in nodes), default=0) or 1
    by_name = {n.name: n for n in nodes}
    owner: dict[str, str] = {}  # value name -> key of the unit that produces it
    units: list[_Unit] = []
    for name in exe.input_names:
        units.append(_Unit(f"in:{name}", name, "input", f"graph input {name}", "io"))
        owner[name] = f"in:{name}"
    for n in nodes:
        if n.role == sources.FOLDED or (n.role == sources.FUSED and not n.done_by):
            continue
        key = n.done_by if n.role == sources.FUSED else n.name
        for v in n.outputs:
            owner[v] = key
        if n.role == sources.FUSED:
            continue
        shape = _compact(next((s for s in n.shapes if s), ""))
        if n.role == sources.COMPUTED:
            chain = [by_name[f] for f in n.fused] + [n]
            ops = "+".join(c.op_type for c in chain)
            opcodes = ", ".join(dict.fromkeys(c.opcode.lower() for c in n.instructions))
            detail = f"{opcodes} · {n.cycles:,} cycles ({n.cycles / total:.1%}) · {shape}"
            tip = (
                f"{' + '.join(c.name for c in chain)} ({ops})\ninstructions: {opcodes}\n"
                f"cycles: {n.cycles:,}\noutput: {shape}, writes {H.size(n.output_bytes)}"
                f"\nweights read: {H.size(n.weight_bytes)}"
            )
            units.append(_Unit(n.name, f"{n.name} {ops}", detail, tip, "run", n.cycles / hottest))
        else:
            what = "view" if n.role == sources.VIEW else "in place"
            tip = f"{n.name} ({n.op_type}): {what}, no instruction\noutput: {shape}"
            units.append(_Unit(n.name, f"{n.name} {n.op_type} ({what})", "", tip, "free"))
    for name in exe.output_names:
        units.append(_Unit(f"out:{name}", name, "output", f"graph output {name}", "io"))
    edges: list[tuple[str, str]] = []
    for n in nodes:
        key = n.done_by if n.role == sources.FUSED else n.name
        if n.role == sources.FOLDED or not key:
            continue
        for v in n.inputs:
            src = owner.get(v)
            if src is not None and src != key and (src, key) not in edges:
                edges.append((src, key))
    for name in exe.output_names:
        if name in owner:
            edges.append((owner[name], f"out:{name}"))
    return units, edges


def svg(nodes: tuple[NodeCost, ...], exe: Any) -> str:
    """The graph as an SVG document: layers top to bottom by longest path from the inputs."""
    units, edges = _units(nodes, exe)
    index = {u.key: i for i, u in enumerate(units)}
    preds: dict[int, list[int]] = {}
    for a, b in edges:
        if a in index and b in index:
            preds.setdefault(index[b], []).append(index[a])
    layer = [0] * len(units)
    for i in range(len(units)):  # units are in topological order
        layer[i] = max((layer[p] + 1 for p in preds.get(i, ())), default=0)
    rows: dict[int, list[int]] = {}
    for i, k in enumerate(layer):
        rows.setdefault(k, []).append(i)
    pos: dict[int, tuple[float, float, float]] = {}  # unit -> (x, y, height)
    y = MARGIN
    width = 0.0
    for k in sorted(rows):
        members = rows[k]
        for start in range(0, len(members), MAX_COLUMNS):
            chunk = members[start : start + MAX_COLUMNS]
            row_h = max(BOX_H if units[i].kind == "run" else PILL_H for i in chunk)
            for col, i in enumerate(chunk):
                h = BOX_H if units[i].kind == "run" else PILL_H
                pos[i] = (MARGIN + col * (BOX_W + GAP_X), y + (row_h - h) / 2, h)
            width = max(width, MARGIN * 2 + len(chunk) * (BOX_W + GAP_X) - GAP_X)
            y += row_h + GAP_Y
    height = y - GAP_Y + MARGIN
    parts = [
        f'<svg class="ipu-graph-svg" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for a, b in edges:
        if a in index and b in index:
            parts.append(_edge(pos[index[a]], pos[index[b]]))
    for i, u in enumerate(units):
        parts.append(_box(u, *pos[i]))
    parts.append("</svg>")
    return "".join(parts)


def _edge(a: tuple[float, float, float], b: tuple[float, float, float]) -> str:
    x0, y0 = a[0] + BOX_W / 2, a[1] + a[2]
    x1, y1 = b[0] + BOX_W / 2, b[1]
    # an edge skipping layers in the same column bends right, past the boxes between
    bend = BOX_W / 2 + GAP_X / 2 if abs(x0 - x1) < 1 and y1 - y0 > BOX_H + 2 * GAP_Y else 0
    c = (y1 - y0) / 2
    return (
        f'<path d="M{x0:.0f},{y0:.0f} C{x0 + bend:.0f},{y0 + c:.0f} {x1 + bend:.0f},'
        f'{y1 - c:.0f} {x1:.0f},{y1:.0f}" fill="none" stroke="#8a8a8a" stroke-width="1.2"/>'
    )


def _box(u: _Unit, x: float, y: float, h: float) -> str:
    if u.kind == "run":  # white to orange: the most expensive node is the darkest
        light = 96 - 46 * u.share
        fill, radius = f"hsl(30,95%,{light:.0f}%)", 4
    elif u.kind == "io":
        fill, radius = "#d4e6fa", h / 2
    else:
        fill, radius = "#e6e6e6", h / 2
    text = _fit(u.title, BOX_W - 12)
    lines = [f'<text x="{x + 6:.0f}" y="{y + 15:.0f}" font-weight="bold">{H.esc(text)}</text>']
    if u.kind == "run":
        detail = _fit(u.detail, BOX_W - 12)
        lines.append(f'<text x="{x + 6:.0f}" y="{y + 31:.0f}">{H.esc(detail)}</text>')
    return (
        f'<g class="ipu-graph-{u.kind}"><title>{H.esc(u.tooltip)}</title>'
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{h:.0f}" rx="{radius:.0f}" '
        f'fill="{fill}" stroke="#555" stroke-width="0.8"/>'
        f'<g fill="#1a1a1a">{"".join(lines)}</g></g>'
    )


_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32", "bool": "bool"}


def _compact(shape: str) -> str:
    """ "float32[1, 24, 112, 112]" as "[1,24,112,112] f32"."""
    dtype, _, dims = shape.partition("[")
    return f"[{dims.replace(' ', '')} {_SHORT_DTYPES.get(dtype, dtype)}" if dims else shape


def _fit(text: str, px: float) -> str:
    """Cut text to about `px` pixels of an 11 px sans-serif font."""
    return H.short(text, int(px / 6.2))
