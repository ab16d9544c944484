"""Manual sharding in the compiler: node placement, stage programs, inter-IPU copies, memory.

Placement comes from the ONNX node attributes `__ipu_number` and `__pipeline_stage` (set by
`pyipu.compiler.sharding.Sharder`, a shard.yaml or PopART's builder; a pipelined node without a
stage is in the stage numbered as its IPU, as in PopART). Stages are the distinct pipeline stage
numbers in ascending order; every stage runs on one IPU. Without pipelining they are the
distinct IPU numbers, or the stage numbers when every node has one (a training graph's backward
pass returns to the IPUs of the forward pass).

Nodes with `__step_end = 1` (a training graph's optimizer update) form the step-end program,
which the runtime runs alone after every step (after a pipeline drained); they need no placement
and count as one stage after the last.

Variables (variables.py) belong to no stage: every stage reads them where they are, and the
stage computing a variable's update (or the step-end program) writes it. The verifier proves
that no two pipelined stages share a byte one of them writes, so a variable that pipelined
stages read is written only by the step-end program.

After lowering (each instruction and tensor records its node's stage), `split_stages` builds one
compute program per stage. A value a later stage reads is copied, by a COPY in the producer
stage's copy program, into a buffer of the next stage, and from there stage by stage (a value
needed two stages later is forwarded through the stage between, as IPU pipelines do). Input
anchors belong to stage 0 and output anchors to the last stage. `plan_stage_memory` gives every
stage its own arena range (stages never share memory, so pipelined stages can run concurrently);
copy sources live to the end of their stage and copy destinations from its start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import helper

from pyipu.compiler.errors import CompileError
from pyipu.compiler.ir import NO_INDEX, Direction, Instr
from pyipu.compiler.lower import ARENA, GraphBuilder
from pyipu.compiler.memory import Lifetime, place
from pyipu.enums import Op

IPU_ATTR = "__ipu_number"
STAGE_ATTR = "__pipeline_stage"
STEP_END_ATTR = "__step_end"  # 1: the node runs in the step-end program (see module)


def _node_name(node: onnx.NodeProto) -> str:
    return node.name or f"<{node.op_type} producing {list(node.output)}>"


def int_attr(node: onnx.NodeProto, name: str) -> int | None:
    """The node's placement attribute `name` (an int >= 0), or None."""
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise CompileError(
                    f"node {_node_name(node)!r}: attribute {name} must be an int >= 0, got {v!r}"
                )
            return int(v)
    return None


def set_int_attr(node: onnx.NodeProto, name: str, value: int) -> None:
    """Set (or replace) the node's placement attribute `name`."""
    for a in node.attribute:
        if a.name == name:
            a.CopyFrom(helper.make_attribute(name, int(value)))
            return
    node.attribute.append(helper.make_attribute(name, int(value)))


def _required(nodes: Sequence[onnx.NodeProto], attr: str, why: str) -> dict[int, int]:
    """id(node) → the node's `attr`, which every node must have."""
    values = {id(n): int_attr(n, attr) for n in nodes}
    missing = [_node_name(n) for n in nodes if values[id(n)] is None]
    if missing:
        raise CompileError(
            f"{why} needs attribute {attr} on every node; missing on "
            f"{missing[:8]}{' ...' if len(missing) > 8 else ''} (use pyipu.compiler.Sharder)"
        )
    return {k: int(v or 0) for k, v in values.items()}


@dataclass(frozen=True)
class Placement:
    """Where every node runs: dense stage index per node and the IPU of each stage."""

    stage_of_node: dict[int, int]  # id(NodeProto) → stage (num_stages: the step end)
    stage_ipus: tuple[int, ...]
    step_end: bool = False  # some nodes form the step-end program

    @property
    def num_stages(self) -> int:
        return len(self.stage_ipus)

    def stage_of(self, node: onnx.NodeProto) -> int:
        return self.stage_of_node.get(id(node), 0)


def user_stage(node: onnx.NodeProto) -> int:
    """A placed node's pipeline stage number: its `__pipeline_stage`, by default (as in PopART)
    its IPU."""
    stage = int_attr(node, STAGE_ATTR)
    return stage if stage is not None else int_attr(node, IPU_ATTR) or 0


def place_nodes(nodes: Sequence[onnx.NodeProto], num_ipus: int, pipelined: bool) -> Placement:
    """Read and validate the placement attributes of `nodes` (topological order)."""
    ends = {id(n) for n in nodes if int_attr(n, STEP_END_ATTR)}
    placed = [n for n in nodes if id(n) not in ends]
    ipu = _required(placed, IPU_ATTR, "virtual_graph_mode='manual'")
    for n in placed:
        if ipu[id(n)] >= num_ipus:
            raise CompileError(
                f"node {_node_name(n)!r} is placed on IPU {ipu[id(n)]}, but num_ipus is {num_ipus}"
            )
    if pipelined or all(int_attr(n, STAGE_ATTR) is not None for n in placed):
        raw = {id(n): user_stage(n) for n in placed}
    else:
        raw = dict(ipu)  # the IPUs run in their numeric order
    numbers = sorted(set(raw.values())) or [0]
    dense = {v: i for i, v in enumerate(numbers)}
    stage_ipu: dict[int, tuple[int, str]] = {}
    for n in placed:
        s = dense[raw[id(n)]]
        if s in stage_ipu and stage_ipu[s][0] != ipu[id(n)]:
            other_ipu, other = stage_ipu[s]
            raise CompileError(
                f"pipeline stage {raw[id(n)]} spans two IPUs: node {other!r} is on IPU "
                f"{other_ipu} and node {_node_name(n)!r} on IPU {ipu[id(n)]}"
            )
        stage_ipu.setdefault(s, (ipu[id(n)], _node_name(n)))
    placement = Placement(
        {id(n): dense[raw[id(n)]] if id(n) not in ends else len(numbers) for n in nodes},
        tuple(stage_ipu[s][0] if s in stage_ipu else 0 for s in range(len(numbers))),
        bool(ends),
    )
    _check_order(nodes, placement)
    return placement


def _check_order(nodes: Sequence[onnx.NodeProto], p: Placement) -> None:
    """A node may not read a value produced by a node of a later stage."""
    producer: dict[str, onnx.NodeProto] = {}
    for n in nodes:
        for i in n.input:
            m = producer.get(i)
            if m is not None and p.stage_of(m) > p.stage_of(n):
                raise CompileError(
                    f"node {_node_name(n)!r} (stage {p.stage_of(n)}) consumes {i!r}, produced "
                    f"by node {_node_name(m)!r} in the later stage {p.stage_of(m)}; stages must "
                    "follow the data flow"
                )
        for o in n.output:
            if o:
                producer[o] = n


@dataclass
class StagePlan:
    """Per stage: compute instructions and the copies to the next stage."""

    ipus: tuple[int, ...]
    programs: list[list[Instr]] = field(default_factory=list)
    copies: list[list[Instr]] = field(default_factory=list)
    step_end: list[Instr] | None = None  # the step-end program, if any
    # roots of stage tensors the step-end program reads (input anchors): they live to the end
    # of their stage's program
    step_end_reads: set[int] = field(default_factory=set)


def split_stages(b: GraphBuilder, ipus: Sequence[int], step_end: bool = False) -> StagePlan:
    """Split the single program of `b` into stage programs plus explicit copies (see module)."""
    n = len(ipus)
    plan = StagePlan(tuple(ipus), [[] for _ in range(n)], [[] for _ in range(n)])
    if step_end:
        plan.step_end = []
    fwd: dict[tuple[int, int], int] = {}  # (root, stage) → root holding it on that stage
    views: dict[tuple[int, int], int] = {}
    inputs = {b.root(a.tensor) for a in b.anchors if a.direction == Direction.INPUT}

    def home(t: int) -> int:
        return b.tensors[b.root(t)].stage

    def local(t: int, k: int) -> int:
        r = b.root(t)
        src = b.tensors[r]
        if src.kind != ARENA or src.stage == k or r in b.variables:
            return t
        if k == n:  # the step-end program runs alone: it reads an input where it is
            if r not in inputs:
                raise CompileError(
                    f"the step-end program reads {src.name!r} of stage {src.stage}: it may "
                    "read only variables, inputs and its own values"
                )
            plan.step_end_reads.add(r)
            return t
        if src.stage > k:
            raise CompileError(
                f"tensor {b.tensors[t].name!r} of stage {src.stage} is read by stage {k}"
            )
        fwd[(r, src.stage)] = r
        for j in range(src.stage + 1, k + 1):
            if (r, j) not in fwd:
                saved, b.current_stage = b.current_stage, j
                nt = b.add(f"{src.name}@stage{j}", src.dtype, src.shape, src.subgraph)
                b.current_stage = saved
                plan.copies[j - 1].append(Instr(Op.COPY, (fwd[(r, j - 1)],), (nt,)))
                fwd[(r, j)] = nt
        dst = fwd[(r, k)]
        if t == r:
            return dst
        if (t, k) not in views:
            v = b.tensors[t]
            saved, b.current_stage = b.current_stage, k
            views[(t, k)] = b.view(dst, v.shape, f"{v.name}@stage{k}")
            b.current_stage = saved
        return views[(t, k)]

    for ins, k in zip(b.programs[0], b.instr_stages[0], strict=True):
        for o in ins.outputs:
            if home(o) != k and b.root(o) not in b.variables:
                raise CompileError(
                    f"{Op(ins.op).name} of stage {k} writes tensor {b.tensors[o].name!r} "
                    f"of stage {home(o)}"
                )
        instr = Instr(ins.op, tuple(local(t, k) for t in ins.inputs), ins.outputs, ins.attrs)
        if k == n and plan.step_end is not None:
            plan.step_end.append(instr)
        else:
            plan.programs[k].append(instr)
    for a in b.anchors:
        if a.has_tensor_data:
            continue
        if a.direction == Direction.OUTPUT and home(a.tensor) == n:
            raise CompileError(
                f"output {a.name!r} is computed by the step-end program; outputs come from the "
                "stages (the step end may only update variables)"
            )
        if a.direction == Direction.OUTPUT and home(a.tensor) != n - 1:
            a.tensor = local(a.tensor, n - 1)
        elif a.direction == Direction.INPUT and home(a.tensor) != 0:
            raise CompileError(f"input anchor {a.name!r} must belong to stage 0")
    return plan


def plan_stage_memory(b: GraphBuilder, plan: StagePlan) -> tuple[dict[int, int], int]:
    """Arena offset of every arena root and the arena size: one disjoint range per stage, one
    for the step-end program's values, and one for the variables (alive for the whole run)."""
    n = len(plan.programs)
    events: dict[int, list[int]] = {}

    def note(t: int, pos: int) -> None:
        events.setdefault(b.root(t), []).append(pos)

    for prog in [*plan.programs, plan.step_end or []]:
        for pos, ins in enumerate(prog):
            for t in (*ins.inputs, *ins.outputs):
                note(t, pos)
    for r in plan.step_end_reads:
        note(r, len(plan.programs[b.tensors[r].stage]))
    for k, copies in enumerate(plan.copies):
        for ins in copies:
            note(ins.inputs[0], len(plan.programs[k]))  # read after stage k's compute
            note(ins.outputs[0], -1)  # written before stage k + 1's compute
    for a in b.anchors:
        if not a.has_tensor_data:
            last = len(plan.programs[n - 1])
            note(a.tensor, -1 if a.direction == Direction.INPUT else last)
    offsets: dict[int, int] = {}
    base = 0
    for k in [None, *range(n + 1)]:  # None: the variables
        lives: dict[int, Lifetime] = {}
        for i, spec in enumerate(b.tensors):
            if spec.base is not None or spec.kind != ARENA or (i in b.variables) != (k is None):
                continue
            if k is None:
                lives[i] = Lifetime(NO_INDEX, -1, 0)
            elif spec.stage == k:
                lives[i] = Lifetime.of(0, events.get(i))
        offs, size = place({r: b.tensors[r].nbytes for r in lives}, lives)
        offsets.update({r: base + o for r, o in offs.items()})
        base += size
    return offsets, base


def output_stages(
    nodes: Sequence[onnx.NodeProto],
    placement: Placement,
    outputs: Iterable[str],
    updates: Iterable[str],
) -> dict[str, int]:
    """The stage each output anchor belongs to: the last one; but a variable's update belongs
    to the stage of the node computing it (a constant update: the step end if there is one)."""
    producer = {o: n for n in nodes for o in n.output}
    last = placement.num_stages - 1
    out = dict.fromkeys(outputs, last)
    for u in updates:
        n = producer.get(u)
        if n is not None:
            out[u] = placement.stage_of(n)
        elif placement.step_end:
            out[u] = placement.num_stages
    return out


def stage_callback(placement: Placement | None) -> Callable[[onnx.NodeProto], int] | None:
    return placement.stage_of if placement is not None else None
