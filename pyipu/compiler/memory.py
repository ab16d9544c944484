"""Memory planning: arena offsets with liveness-based reuse, TENSOR_DATA packing, programs.

Only roots get storage; a view takes its root's offset (plus its own, for a view of part of the
root: concat_inplace.py), and every use of a view counts as a use of the root (so views extend
their root's lifetime). A root lives from its first use to its last use in its subgraph's Main
program, inclusive: an instruction's output never shares storage with its inputs. Input anchors
live from before the first instruction, output anchors until after the last. Subgraphs of a
fused model never run at the same time, so their tensors may share memory; tensors of every
subgraph (the `index` input) conflict with everything.

With overlap I/O (num_io_tiles > 0) the runtime double-buffers the streamed anchors, which needs
every tensor to lie either inside one anchor's storage or outside all of them: the roots of
streamed anchors then conflict with every other root (no reuse of anchor storage).

Placement is greedy, largest first, at the lowest 64-aligned offset that overlaps no placed root
whose lifetime intersects; an interval index finds those roots without scanning all of them, so
planning is O(n log n) for n roots when few lifetimes overlap each one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyipu.compiler.ir import (
    ALIGN,
    NO_INDEX,
    Anchor,
    Direction,
    Instr,
    Location,
    ModelIR,
    Program,
    Stage,
    TensorSpec,
    align,
)
from pyipu.compiler.lower import ARENA, GraphBuilder
from pyipu.enums import Op

if TYPE_CHECKING:
    from pyipu.compiler.staging import StagePlan


@dataclass(frozen=True)
class Lifetime:
    subgraph: int  # NO_INDEX: alive in every subgraph, for the whole program
    start: int  # -1: before the first instruction
    end: int  # len(program): after the last instruction; start > end: never used

    @classmethod
    def of(cls, subgraph: int, positions: list[int] | None) -> Lifetime:
        """From the positions that use a root; none (a tensor whose instructions were fused
        away) gives a lifetime that overlaps nothing, so it takes no arena space of its own."""
        return cls(subgraph, min(positions), max(positions)) if positions else cls(subgraph, 0, -1)

    @property
    def unused(self) -> bool:
        return self.start > self.end

    def overlaps(self, other: Lifetime) -> bool:
        if self.unused or other.unused:
            return False
        if self.subgraph == NO_INDEX or other.subgraph == NO_INDEX:
            return True
        if self.subgraph != other.subgraph:
            return False
        return self.start <= other.end and other.start <= self.end


def lifetimes(b: GraphBuilder, pin_anchors: bool = False) -> dict[int, Lifetime]:
    """Lifetime of every arena root, from the instruction lists and the anchors.

    pin_anchors: roots of streamed anchors live always (their storage is never reused).
    """
    events: dict[int, list[int]] = {}
    for prog in b.programs:
        for pos, ins in enumerate(prog):
            for t in (*ins.inputs, *ins.outputs):
                events.setdefault(b.root(t), []).append(pos)
    for a in b.anchors:
        if a.has_tensor_data:
            continue
        r = b.root(a.tensor)
        end = len(b.programs[a.subgraph]) if a.subgraph != NO_INDEX else 0
        events.setdefault(r, []).append(-1 if a.direction == Direction.INPUT else end)
    out: dict[int, Lifetime] = {}
    for i, spec in enumerate(b.tensors):
        if spec.base is None and spec.kind == ARENA:
            out[i] = Lifetime.of(spec.subgraph, events.get(i))
    for r in b.variables:  # the device's state: its bytes are its own for the whole run
        out[r] = Lifetime(NO_INDEX, -1, 0)
    if pin_anchors:
        for a in b.anchors:
            r = b.root(a.tensor)
            if not a.has_tensor_data and r in out:
                out[r] = Lifetime(NO_INDEX, -1, out[r].end)
    return out


class _Placed:
    """Placed roots of one subgraph by lifetime, to find those overlapping a lifetime in
    O(log T + k) (T: program length, k: the answer) instead of scanning every placed root.

    Two segment trees over positions: `cover` holds each lifetime at the O(log T) nodes that
    decompose it (a point query walks one root-to-leaf path), `starts` holds it at every
    ancestor of its start leaf (a range query of starts visits O(log T) nodes). A lifetime
    overlaps [a, b] iff it contains a, or starts in (a, b]: the two answers are disjoint.
    """

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.size = 1 << max(hi - lo, 1).bit_length()
        self.cover: list[list[int]] = [[] for _ in range(2 * self.size)]
        self.starts: list[list[int]] = [[] for _ in range(2 * self.size)]

    def add(self, r: int, life: Lifetime) -> None:
        a, b = life.start - self.lo + self.size, life.end - self.lo + self.size + 1
        i = a
        while i:
            self.starts[i].append(r)
            i >>= 1
        while a < b:
            if a & 1:
                self.cover[a].append(r)
                a += 1
            if b & 1:
                b -= 1
                self.cover[b].append(r)
            a >>= 1
            b >>= 1

    def overlapping(self, life: Lifetime) -> list[int]:
        out: list[int] = []
        i = life.start - self.lo + self.size
        while i:
            out += self.cover[i]
            i >>= 1
        a, b = life.start - self.lo + self.size + 1, life.end - self.lo + self.size + 1
        while a < b:
            if a & 1:
                out += self.starts[a]
                a += 1
            if b & 1:
                b -= 1
                out += self.starts[b]
            a >>= 1
            b >>= 1
        return out


def place(sizes: dict[int, int], lives: dict[int, Lifetime]) -> tuple[dict[int, int], int]:
    """Offsets for roots of the given sizes (bytes) and the arena size (multiple of 64)."""
    offsets: dict[int, int] = {}
    bounds: dict[int, tuple[int, int]] = {}
    for life in lives.values():
        if not life.unused and life.subgraph != NO_INDEX:
            lo, hi = bounds.get(life.subgraph, (life.start, life.end))
            bounds[life.subgraph] = (min(lo, life.start), max(hi, life.end))
    by_subgraph = {g: _Placed(lo, hi) for g, (lo, hi) in bounds.items()}
    everywhere: list[int] = []  # placed NO_INDEX roots: they overlap every used root
    used: list[int] = []  # every placed used root (what a NO_INDEX root overlaps)
    order = sorted(sizes, key=lambda r: (-sizes[r], lives[r].start, r))
    for r in order:
        size = align(max(sizes[r], 1))
        life = lives[r]
        if life.unused:
            others: list[int] = []
        elif life.subgraph == NO_INDEX:
            others = used
        else:
            others = everywhere + by_subgraph[life.subgraph].overlapping(life)
        busy = sorted((offsets[p], offsets[p] + align(max(sizes[p], 1))) for p in others)
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, hi)
        offsets[r] = at
        if not life.unused:
            used.append(r)
            if life.subgraph == NO_INDEX:
                everywhere.append(r)
            else:
                by_subgraph[life.subgraph].add(r, life)
    arena = max((offsets[r] + align(max(sizes[r], 1)) for r in offsets), default=0)
    return offsets, align(arena)


def build_ir(
    b: GraphBuilder,
    *,
    index_name: str | None = None,
    ipu_version: int = 2,
    num_ipus: int = 1,
    batches_per_step: int = 1,
    num_io_tiles: int = 0,
    opaque: tuple[tuple[str, bytes], ...] = (),
    plan: StagePlan | None = None,
    pipelined: bool = False,
) -> ModelIR:
    """Plan memory and assemble the ModelIR.

    Program 0 (Load) binds every weight and copies each variable's weight into the variable's
    arena tensor (variables.py); program i + 1 is the Main program of subgraph i. With a
    stage plan (manual sharding, one subgraph) programs 1..S are the stage programs (Main is
    stage 0's), the non-empty copy programs follow, then the step-end program (staging.py).
    """
    if plan is not None:
        from pyipu.compiler.staging import plan_stage_memory

        offsets, arena_size = plan_stage_memory(b, plan)
    else:
        lives = lifetimes(b, pin_anchors=num_io_tiles > 0)
        offsets, arena_size = place({r: b.tensors[r].nbytes for r in lives}, lives)

    data_offset: dict[int, int] = {}
    cursor = 0
    for i, t in enumerate(b.tensors):
        if t.kind != ARENA and t.base is None:
            data_offset[i] = cursor
            cursor = align(cursor + t.nbytes, ALIGN)

    tensors: list[TensorSpec] = []
    for i, t in enumerate(b.tensors):
        root = b.root(i)
        if t.kind == ARENA:
            at = offsets[root] + t.offset
            tensors.append(TensorSpec(t.name, t.dtype, t.shape, Location.ARENA, at))
        else:
            data = b.tensors[root].data
            tensors.append(
                TensorSpec(t.name, t.dtype, t.shape, Location.TENSOR_DATA, data_offset[root], data)
            )

    binds = tuple(
        Instr(Op.BIND, (), (i,))
        for i, t in enumerate(tensors)
        if t.location == Location.TENSOR_DATA
    )
    starts = tuple(Instr(Op.COPY, (w,), (v,)) for v, w in b.variables.items())
    programs = [Program(0, binds + starts)]
    stages: list[Stage] = []
    step_end = NO_INDEX
    if plan is None:
        programs += [Program(s + 1, tuple(prog)) for s, prog in enumerate(b.programs)]
    else:
        programs += [Program(k + 1, tuple(prog)) for k, prog in enumerate(plan.programs)]
        for k, ipu in enumerate(plan.ipus):
            copy_id = NO_INDEX
            if plan.copies[k]:
                copy_id = len(programs)
                programs.append(Program(copy_id, tuple(plan.copies[k])))
            stages.append(Stage(k + 1, ipu, copy_id))
        if plan.step_end is not None:
            step_end = len(programs)
            programs.append(Program(step_end, tuple(plan.step_end)))
    # Runtime inputs first, then weights, then outputs (stable within each group).
    ordered = sorted(b.anchors, key=lambda a: (a.direction == Direction.OUTPUT, a.has_tensor_data))
    anchors = tuple(
        Anchor(a.name, Direction(a.direction), a.tensor, a.subgraph, a.has_tensor_data)
        for a in ordered
    )
    names = [a.name for a in anchors]
    index_anchor = names.index(index_name) if index_name is not None else NO_INDEX
    return ModelIR(
        tensors=tuple(tensors),
        anchors=anchors,
        programs=tuple(programs),
        load_program=0,
        main_programs=tuple(range(1, len(b.programs) + 1)),
        stages=tuple(stages),
        pipelined=pipelined,
        step_end_program=step_end,
        arena_size=arena_size,
        index_anchor=index_anchor,
        ipu_version=ipu_version,
        num_ipus=num_ipus,
        batches_per_step=batches_per_step,
        num_io_tiles=num_io_tiles,
        opaque=(*opaque, b.sources().blob()),
    )
