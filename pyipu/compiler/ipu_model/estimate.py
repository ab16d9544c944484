"""The IPU Model's estimate of a ModelIR: per-tile memory over time, cycles, latency, throughput.

Everything is recomputed from the ModelIR (so a loaded PopEF file reports what the compiler
saw) plus `Settings`, which the compiler stores in the "pyipu.ipu_model" opaque blob when they
differ from the defaults.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyipu.compiler import sources
from pyipu.compiler.ipu_model.cycles import InstructionCost, instruction_cost
from pyipu.compiler.ipu_model.mapping import (
    WEIGHTS,
    Mapping,
    Timeline,
    live_segments,
    map_tensors,
)
from pyipu.compiler.ipu_model.report import CATEGORIES, IPUModelReport, Liveness, TensorMemory
from pyipu.compiler.ir import NO_INDEX, ModelIR
from pyipu.compiler.sources import Sources
from pyipu.ipu_targets import IPUTarget, target

SETTINGS_BLOB = "pyipu.ipu_model"
CODE_BYTES_PER_INSTRUCTION = 64  # vertex state + exchange code, per instruction per tile
_DYNAMIC = ("activations", "io", "temporaries")  # categories that change over a timeline


@dataclass(frozen=True)
class Settings:
    """Compile options the estimate depends on that the ModelIR itself does not record."""

    available_memory_proportion: float = 0.6
    allow_out_of_memory: bool = False

    def blob(self) -> tuple[str, bytes] | None:
        """The opaque blob recording non-default settings (None: all default)."""
        if self == Settings():
            return None
        return SETTINGS_BLOB, json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def of(cls, ir: ModelIR) -> Settings:
        for name, payload in ir.opaque:
            if name == SETTINGS_BLOB:
                try:
                    d = json.loads(payload)
                    return cls(
                        float(d["available_memory_proportion"]), bool(d["allow_out_of_memory"])
                    )
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"malformed {SETTINGS_BLOB!r} opaque blob: {e}") from e
        return cls()


CHUNK = 256  # timeline positions materialised at once (bounds memory for long programs)


class _Rects:
    """Rectangles (positions lo..hi inclusive × global tiles a..b-1, value) summed with a 2-D
    difference array: one np.add.at for any number of tensors.

    Tiles are summed in column groups: between two consecutive rectangle edges every tile holds
    the same bytes, so the work is positions × edges rather than positions × tiles.
    """

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int]] = []

    def add(self, lo: int, hi: int, runs: list[tuple[int, int, int]]) -> None:
        self.rows.extend((lo, hi, a, b, v) for a, b, v in runs)

    def _array(self) -> np.ndarray:
        return np.array(self.rows, np.int64).reshape(-1, 5)

    def edges(self) -> np.ndarray:
        """The tiles where some rectangle starts or ends."""
        return np.unique(self._array()[:, 2:4])

    def chunks(self, positions: int, cols: np.ndarray) -> Iterator[np.ndarray]:
        """The summed bytes [position, group], CHUNK positions at a time; group j is tiles
        cols[j]..cols[j+1]-1 (`cols`: sorted, with 0, the tile count and every edge)."""
        lo, hi, a, b, v = self._array().T
        r = np.concatenate([lo, lo, hi + 1, hi + 1])
        order = np.argsort(r, kind="stable")
        r = r[order]
        c = np.searchsorted(cols, np.concatenate([a, b, a, b]))[order]
        val = np.concatenate([v, -v, -v, v])[order]
        carry = np.zeros(cols.size, np.int64)
        for r0 in range(0, positions, CHUNK):
            r1 = min(r0 + CHUNK, positions)
            i0, i1 = np.searchsorted(r, [r0, r1])
            d = np.zeros((r1 - r0, cols.size), np.int64)
            np.add.at(d, (r[i0:i1] - r0, c[i0:i1]), val[i0:i1])
            d[0] += carry
            d = d.cumsum(0)
            carry = d[-1].copy()
            yield d.cumsum(1)[:, : cols.size - 1]

    def static(self, tiles: int) -> np.ndarray:
        """The sum, per tile, of rectangles that all sit at position 0."""
        cols = _columns(tiles, self.edges())
        return np.repeat(next(self.chunks(1, cols))[0], np.diff(cols))


def _columns(tiles: int, *edges: np.ndarray) -> np.ndarray:
    return np.unique(np.concatenate([np.array([0, tiles], np.int64), *edges]))


def _timeline(
    ir: ModelIR,
    m: Mapping,
    tl: Timeline,
    tpi: int,
    budget: int,
    tgt: IPUTarget,
    code: _Rects,
    src: _Sources | None,
) -> tuple[list[InstructionCost], dict[str, _Rects]]:
    """Costs and the live bytes of activations, io and temporaries over the timeline."""
    live = {k: _Rects() for k in _DYNAMIC}
    for s, segs in live_segments(ir, m, tl).items():
        runs = m.slots[s].tile_map.rects(tpi)
        for lo, hi, anchor in segs:
            live["io" if anchor else "activations"].add(lo, hi, runs)
    costs: list[InstructionCost] = []
    for pos, step in enumerate(tl.steps, start=1):
        cost, work, temps = instruction_cost(ir, m, step, tgt, budget)
        if step.instr.outputs:
            out = step.instr.outputs[0]
            node, op_type = _node_of(src, out)
            cost = dataclasses.replace(
                cost, output=ir.tensors[out].name, node=node, op_type=op_type
            )
        costs.append(cost)
        code.add(0, 0, [(a, b, CODE_BYTES_PER_INSTRUCTION) for a, b in work])
        live["temporaries"].add(pos, pos, temps)
    return costs, live


@dataclass(frozen=True)
class _Sources:
    """The compiled graph's nodes and which of them each node's instructions also do."""

    src: Sources
    doing: dict[int, list[int]]  # node → the nodes whose work its instructions do

    @classmethod
    def of(cls, ir: ModelIR) -> _Sources | None:
        src = sources.of(ir.opaque, len(ir.tensors))
        if src is None:
            return None
        doing: dict[int, list[int]] = {}
        for k, (_, doer) in enumerate(sources.roles(src, ir)):
            if doer != sources.NO_NODE:
                doing.setdefault(doer, []).append(k)
        return cls(src, doing)


def _node_of(s: _Sources | None, tensor: int) -> tuple[str, str]:
    """("Conv_3+Relu_4", "Conv+Relu"): the nodes an instruction writing `tensor` computes."""
    k = s.src.tensor_nodes[tensor] if s is not None else sources.NO_NODE
    if s is None or k == sources.NO_NODE:
        return "", ""
    nodes = [s.src.nodes[j] for j in sorted(s.doing.get(k, [k]))]
    return "+".join(n.name for n in nodes), "+".join(n.op_type for n in nodes)


def _keep_peak(
    live: dict[str, _Rects], positions: int, peak: np.ndarray, dyn: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Raise `peak` (per tile) to this timeline's peak, recording the categories there.
    Returns each category's bytes over the timeline, summed over the tiles."""
    cols = _columns(peak.size, *(live[k].edges() for k in _DYNAMIC))
    groups = np.arange(cols.size - 1)
    best = np.full(groups.size, -1, np.int64)  # per column group, over the timeline
    parts_at = {k: np.zeros(groups.size, np.int64) for k in _DYNAMIC}
    gens = [live[k].chunks(positions, cols) for k in _DYNAMIC]
    width = np.diff(cols)
    totals: dict[str, list[np.ndarray]] = {k: [] for k in _DYNAMIC}
    for parts in zip(*gens, strict=True):
        for k, arr in zip(_DYNAMIC, parts, strict=True):
            totals[k].append(arr @ width)
        total = sum(parts[1:], start=parts[0])  # an array, as every part is
        at = total.argmax(0)
        here = total[at, groups]
        better = here > best
        best[better] = here[better]
        for k, arr in zip(_DYNAMIC, parts, strict=True):
            parts_at[k][better] = arr[at, groups][better]
    tile_best = np.repeat(best, width)
    better = tile_best > peak
    peak[better] = tile_best[better]
    for k in _DYNAMIC:
        dyn[k][better] = np.repeat(parts_at[k], width)[better]
    return {k: np.concatenate(v) for k, v in totals.items()}


def _host_bytes(ir: ModelIR, anchors: tuple[int, ...]) -> int:
    return sum(
        ir.tensors[ir.anchors[i].tensor].nbytes
        for i in anchors
        if not ir.anchors[i].has_tensor_data
    )


def estimate(ir: ModelIR, settings: Settings | None = None) -> IPUModelReport:
    """The IPU Model's report of a ModelIR (settings: from its opaque blob when None)."""
    cfg = settings if settings is not None else Settings.of(ir)
    tgt = target(ir.ipu_version)
    tpi = tgt.tiles_per_ipu
    tiles = ir.num_ipus * tpi
    budget = int(cfg.available_memory_proportion * tgt.memory_bytes_per_tile)
    m = map_tensors(ir, tpi)
    src = _Sources.of(ir)

    weights, io_buf, code = _Rects(), _Rects(), _Rects()
    for slot in m.slots:
        if slot.category == WEIGHTS:
            weights.add(0, 0, slot.tile_map.rects(tpi))
    for _, tm in m.io_buffers:
        io_buf.add(0, 0, tm.rects(tpi))  # one batch of each streamed anchor

    peak = np.full(tiles, -1, np.int64)
    dyn = {k: np.zeros(tiles, np.int64) for k in _DYNAMIC}
    costs: list[InstructionCost] = []
    program_cycles: dict[int, int] = {}
    host_bytes = 0
    timelines: list[tuple[tuple[int, ...], tuple[InstructionCost, ...], dict[str, Any]]] = []
    for tl in m.timelines:
        c, live = _timeline(ir, m, tl, tpi, budget, tgt, code, src)
        costs += c
        for cost in c:
            program_cycles[cost.program] = program_cycles.get(cost.program, 0) + cost.cycles
        host_bytes = max(host_bytes, _host_bytes(ir, tl.anchors))
        positions = len(tl.steps) + 2
        over_time = _keep_peak(live, positions, peak, dyn)
        timelines.append((tuple(dict.fromkeys(st.program for st in tl.steps)), tuple(c), over_time))
    for pid in ir.main_programs:
        program_cycles.setdefault(pid, 0)

    io_static = io_buf.static(tiles)
    cats = {
        "weights": weights.static(tiles),
        "activations": dyn["activations"],
        "io": dyn["io"] + io_static,
        "temporaries": dyn["temporaries"],
        "code": code.static(tiles),
    }
    shape = (ir.num_ipus, tpi)
    categories = {k: v.reshape(shape) for k, v in cats.items()}
    static = {"weights": cats["weights"].sum(), "io": io_static.sum(), "code": cats["code"].sum()}
    liveness = tuple(
        Liveness(
            programs,
            steps,
            {
                k: over_time[k] + static.get(k, 0)
                if k in over_time
                else np.full(len(steps) + 2, static[k], np.int64)
                for k in CATEGORIES
            },
        )
        for programs, steps, over_time in timelines
    )
    memory = sum(categories.values()).reshape(shape)

    clock = tgt.tile_clock_frequency
    if ir.stages:
        stage = [
            program_cycles.get(s.program, 0)
            + (program_cycles.get(s.copy_program, 0) if s.copy_program != NO_INDEX else 0)
            for s in ir.stages
        ]
        batch = sum(stage)
        interval = max(stage) if ir.pipelined else batch
    else:
        batch = max(program_cycles[p] for p in ir.main_programs) if ir.main_programs else 0
        interval = batch
    host = -(-host_bytes * int(clock) // int(tgt.host_link_bytes_per_second))
    bps = ir.batches_per_step
    if ir.num_io_tiles > 0:  # overlap I/O: transfers of one batch hide behind another's compute
        step = bps * max(interval, host) + min(interval, host) + (batch - interval)
    else:
        step = bps * (interval + host) + (batch - interval)
    throughput = bps * ir.replication_factor * clock / step if step else float("inf")

    tensors = sorted(
        (
            TensorMemory(
                s.name,
                s.category,
                s.nbytes,
                s.tile_map.ntiles,
                s.tile_map.ipu,
                s.tile_map.max_elements * s.tile_map.itemsize,
            )
            for s in m.slots
        ),
        key=lambda t: (-t.nbytes, t.name),
    )
    return IPUModelReport(
        target=tgt,
        num_ipus=ir.num_ipus,
        num_io_tiles=ir.num_io_tiles,
        batches_per_step=bps,
        replication_factor=ir.replication_factor,
        available_memory_proportion=cfg.available_memory_proportion,
        allow_out_of_memory=cfg.allow_out_of_memory,
        memory=memory,
        categories=categories,
        tensors=tuple(tensors[:50]),
        instructions=tuple(costs),
        program_cycles=program_cycles,
        batch_cycles=batch,
        host_io_cycles=host,
        step_cycles=step,
        latency_s=(batch + host) / clock,
        liveness=liveness,
        throughput=throughput,
    )
