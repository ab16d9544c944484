"""Tile mapping: where each tensor's bytes live and which programs run on which IPU.

Rules (docs/ipu-model.md):
- Storage is per *slot*: tensors with the same location, offset and size are one slot (a view
  and its root; the compiler's views are whole-tensor reshapes/bit-casts).
- A slot is mapped linearly in grains over a pool of tiles: grain = the vector width in
  elements (8 bytes ÷ item size), at least MIN_ELEMENTS_PER_TILE elements per tile, as few
  tiles as that allows but spread over the whole pool when the tensor is large.
- Activations (and anchors) start at the pool's first tile, so tensors of the same shape sit on
  the same tiles and element-wise chains need no exchange. Weights start where the previous
  weight ended (wrapping), so many small weights do not pile up on tile 0.
- Stream buffers of streamed anchors live on the I/O tiles (the last `num_io_tiles` tiles of an
  IPU) when there are any.
- With stages (manual sharding), a tensor lives on the IPU of the first stage program that
  touches it; the outputs of a stage's copy program live on the next stage's IPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyipu.compiler.ir import NO_INDEX, Direction, Instr, Location, ModelIR, np_dtype
from pyipu.enums import Op

MIN_ELEMENTS_PER_TILE = 128
GRAIN_BYTES = 8


@dataclass(frozen=True)
class TileMap:
    """A linear mapping: `ntiles` consecutive tiles (wrapping inside the pool) from `start`;
    each holds `per_tile` elements except the last, which holds `last`."""

    ipu: int
    pool_base: int  # first tile of the pool inside the IPU (0, or the first I/O tile)
    pool_size: int
    start: int  # inside the pool
    ntiles: int
    per_tile: int
    last: int
    itemsize: int

    @property
    def max_elements(self) -> int:
        return self.per_tile if self.ntiles > 1 else self.last

    def rects(self, tiles_per_ipu: int) -> list[tuple[int, int, int]]:
        """(first global tile, end global tile, bytes per tile) runs covering the mapping."""
        base = self.ipu * tiles_per_ipu + self.pool_base
        out: list[tuple[int, int, int]] = []
        full = self.ntiles - 1
        if full > 0:
            a, b = self.start, self.start + full
            v = self.per_tile * self.itemsize
            if b <= self.pool_size:
                out.append((base + a, base + b, v))
            else:
                out.append((base + a, base + self.pool_size, v))
                out.append((base, base + b - self.pool_size, v))
        lt = (self.start + full) % self.pool_size
        out.append((base + lt, base + lt + 1, self.last * self.itemsize))
        return out

    def same_tiles(self, other: TileMap) -> bool:
        """Element i of both tensors is on the same tile (no exchange for element-wise ops)."""
        return (self.ipu, self.pool_base, self.start, self.per_tile, self.ntiles, self.last) == (
            other.ipu,
            other.pool_base,
            other.start,
            other.per_tile,
            other.ntiles,
            other.last,
        )


def linear_map(
    numel: int, itemsize: int, ipu: int, pool_base: int, pool_size: int, start: int = 0
) -> TileMap:
    """Map `numel` elements linearly in grains over a pool of `pool_size` tiles."""
    grain = max(1, GRAIN_BYTES // itemsize)
    grains = -(-numel // grain)
    per_grains = max(-(-grains // pool_size), -(-MIN_ELEMENTS_PER_TILE // grain))
    per = min(per_grains * grain, numel)
    ntiles = -(-numel // per)
    return TileMap(
        ipu,
        pool_base,
        pool_size,
        start % pool_size,
        ntiles,
        per,
        numel - (ntiles - 1) * per,
        itemsize,
    )


WEIGHTS, ACTIVATIONS, IO = "weights", "activations", "io"


@dataclass(frozen=True)
class Slot:
    """Storage shared by a root tensor and its views."""

    name: str  # its first anchor's name, else its first tensor's (the root's)
    category: str  # WEIGHTS | ACTIVATIONS | IO (an anchor streamed from/to the host)
    nbytes: int
    tile_map: TileMap


@dataclass(frozen=True)
class Step:
    """One instruction of a timeline."""

    program: int
    index: int
    instr: Instr
    inter_ipu: bool  # a COPY of a stage's copy program: an IPU-Link transfer


@dataclass(frozen=True)
class Timeline:
    """Instructions that run one after another with one set of live tensors (a Main program, or
    the stages of a sharded model in order). Position 0 is "before", len(steps)+1 "after"."""

    steps: tuple[Step, ...]
    anchors: tuple[int, ...]  # indexes into ir.anchors


@dataclass(frozen=True)
class Mapping:
    compute_tiles: int
    tensor_slot: tuple[int, ...]  # tensor index → slot index
    slots: tuple[Slot, ...]
    io_buffers: tuple[tuple[int, TileMap], ...]  # (slot, stream buffer on the I/O tiles)
    timelines: tuple[Timeline, ...]


def _stage_ipus(ir: ModelIR) -> tuple[dict[int, int], dict[int, int]]:
    """program id → IPU, and copy program id → IPU of the stage after it."""
    prog_ipu: dict[int, int] = {}
    copy_dest: dict[int, int] = {}
    for s, st in enumerate(ir.stages):
        prog_ipu[st.program] = st.ipu
        if st.copy_program != NO_INDEX:
            prog_ipu[st.copy_program] = st.ipu
            nxt = ir.stages[s + 1].ipu if s + 1 < len(ir.stages) else st.ipu
            copy_dest[st.copy_program] = nxt
    return prog_ipu, copy_dest


def timelines(ir: ModelIR) -> tuple[Timeline, ...]:
    staged = [p for st in ir.stages for p in (st.program, st.copy_program) if p != NO_INDEX]
    copies = {st.copy_program for st in ir.stages}
    out: list[Timeline] = []
    if staged:
        steps = tuple(
            Step(pid, i, ins, pid in copies and ins.op == Op.COPY)
            for pid in staged
            for i, ins in enumerate(ir.program(pid).instrs)
        )
        out.append(Timeline(steps, tuple(range(len(ir.anchors)))))
    for sub, pid in enumerate(ir.main_programs):
        if pid in staged:
            continue
        instrs = ir.program(pid).instrs
        if staged and not instrs:
            continue
        anchors = tuple(i for i, a in enumerate(ir.anchors) if a.subgraph in (sub, NO_INDEX))
        out.append(
            Timeline(tuple(Step(pid, i, ins, False) for i, ins in enumerate(instrs)), anchors)
        )
    return tuple(out)


def tensor_ipus(ir: ModelIR) -> list[int]:
    ipu = [-1] * len(ir.tensors)
    prog_ipu, copy_dest = _stage_ipus(ir)
    for st in ir.stages:
        for pid in (st.program, st.copy_program):
            if pid == NO_INDEX:
                continue
            for ins in ir.program(pid).instrs:
                outs_ipu = copy_dest.get(pid, prog_ipu[pid])
                for t in ins.inputs:
                    if ipu[t] < 0:
                        ipu[t] = prog_ipu[pid]
                for t in ins.outputs:
                    if ipu[t] < 0:
                        ipu[t] = outs_ipu
    return [max(0, i) for i in ipu]


def map_tensors(ir: ModelIR, tiles_per_ipu: int) -> Mapping:
    """Slots, their tile maps, the I/O stream buffers and the timelines of a ModelIR."""
    compute = tiles_per_ipu - ir.num_io_tiles
    ipus = tensor_ipus(ir)
    streamed = {a.tensor for a in ir.anchors if not a.has_tensor_data}
    key_slot: dict[tuple[int, int, int, int], int] = {}
    tensor_slot: list[int] = []
    names: list[str] = []
    first: list[int] = []
    for i, t in enumerate(ir.tensors):
        key = (int(t.location), t.offset, t.nbytes, ipus[i])
        s = key_slot.setdefault(key, len(key_slot))
        if s == len(names):
            names.append(t.name)
            first.append(i)
        tensor_slot.append(s)
    io_slots = {tensor_slot[t] for t in streamed}
    for a in reversed(ir.anchors):  # PopEF stores anchor names only: prefer them
        names[tensor_slot[a.tensor]] = a.name
    slots: list[Slot] = []
    weight_cursor = [0] * ir.num_ipus
    for s, i in enumerate(first):
        t = ir.tensors[i]
        itemsize = np_dtype(t.dtype).itemsize
        ipu = ipus[i]
        if t.location == Location.TENSOR_DATA:
            tm = linear_map(t.numel, itemsize, ipu, 0, compute, weight_cursor[ipu])
            weight_cursor[ipu] = (tm.start + tm.ntiles) % compute
            cat = WEIGHTS
        else:
            tm = linear_map(t.numel, itemsize, ipu, 0, compute)
            cat = IO if s in io_slots else ACTIVATIONS
        slots.append(Slot(names[s], cat, t.nbytes, tm))
    io_buffers: list[tuple[int, TileMap]] = []
    if ir.num_io_tiles > 0:
        cursor = [0] * ir.num_ipus
        for s in sorted(io_slots):
            sl = slots[s]
            t = ir.tensors[first[s]]
            tm = linear_map(
                t.numel,
                sl.tile_map.itemsize,
                sl.tile_map.ipu,
                compute,
                ir.num_io_tiles,
                cursor[sl.tile_map.ipu],
            )
            cursor[sl.tile_map.ipu] = (tm.start + tm.ntiles) % ir.num_io_tiles
            io_buffers.append((s, tm))
    return Mapping(compute, tuple(tensor_slot), tuple(slots), tuple(io_buffers), timelines(ir))


def live_segments(ir: ModelIR, m: Mapping, tl: Timeline) -> dict[int, list[tuple[int, int, bool]]]:
    """Arena slot → [(first, last, is_anchor)] timeline positions it holds a live value.

    A value lives from a write (an instruction output, or an input anchor before the first
    instruction) to its last read before the next write; output anchors are read after the last
    instruction. is_anchor: the value is an input or output anchor's (its bytes count as I/O,
    although the same storage may hold activations at other times). Weights are not included
    (always live).
    """
    events: dict[int, list[tuple[int, bool, bool]]] = {}  # (position, is_write, is_anchor)
    end = len(tl.steps) + 1
    for ai in tl.anchors:
        a = ir.anchors[ai]
        if a.has_tensor_data:
            continue
        ev = (0, True, True) if a.direction == Direction.INPUT else (end, False, True)
        events.setdefault(m.tensor_slot[a.tensor], []).append(ev)
    for pos, st in enumerate(tl.steps, start=1):
        for t in st.instr.inputs:
            events.setdefault(m.tensor_slot[t], []).append((pos, False, False))
        for t in st.instr.outputs:
            events.setdefault(m.tensor_slot[t], []).append((pos, True, False))
    out: dict[int, list[tuple[int, int, bool]]] = {}
    for s, evs in events.items():
        if m.slots[s].category == WEIGHTS:
            continue
        evs.sort()  # at one position, reads (False) come before writes (True)
        segs: list[tuple[int, int, bool]] = []
        lo = hi = -1
        anchor = False
        for pos, write, is_anchor in evs:
            if write:
                if lo >= 0:
                    # An in-place instruction's read and write share the position: one value.
                    last = hi if hi < pos else pos - 1
                    if last >= lo:
                        segs.append((lo, last, anchor))
                lo = hi = pos
                anchor = is_anchor
            elif lo < 0:  # read before any write here: live from the start
                lo, hi, anchor = 0, pos, is_anchor
            else:
                hi = pos
                anchor = anchor or is_anchor
        segs.append((lo, hi, anchor))
        out[s] = segs
    return out
