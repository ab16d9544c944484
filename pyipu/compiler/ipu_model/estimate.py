"""The IPU Model's estimate of a ModelIR: per-tile memory over time, cycles, latency, throughput.

Everything is recomputed from the ModelIR (so a loaded PopEF file reports what the compiler
saw) plus `Settings`, which the compiler stores in the "pyipu.ipu_model" opaque blob when they
differ from the defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from pyipu.compiler.ipu_model.cycles import InstructionCost, instruction_cost
from pyipu.compiler.ipu_model.mapping import (
    WEIGHTS,
    Mapping,
    Timeline,
    live_segments,
    map_tensors,
)
from pyipu.compiler.ipu_model.report import IPUModelReport, TensorMemory
from pyipu.compiler.ir import NO_INDEX, ModelIR
from pyipu.ipu_targets import target

SETTINGS_BLOB = "pyipu.ipu_model"
CODE_BYTES_PER_INSTRUCTION = 64  # vertex state + exchange code, per instruction per tile
STREAM_BUFFERS = 2  # overlap I/O double-buffers each streamed anchor on the I/O tiles


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
                d = json.loads(payload)
                return cls(float(d["available_memory_proportion"]), bool(d["allow_out_of_memory"]))
        return cls()


class _Rects:
    """Rectangles (positions lo..hi inclusive × global tiles a..b-1, value) summed with a 2-D
    difference array: one np.add.at for any number of tensors."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int]] = []

    def add(self, lo: int, hi: int, runs: list[tuple[int, int, int]]) -> None:
        self.rows.extend((lo, hi, a, b, v) for a, b, v in runs)

    def dense(self, positions: int, tiles: int) -> np.ndarray:
        d = np.zeros((positions + 1, tiles + 1), np.int64)
        if self.rows:
            lo, hi, a, b, v = np.array(self.rows, np.int64).T
            np.add.at(d, (lo, a), v)
            np.add.at(d, (lo, b), -v)
            np.add.at(d, (hi + 1, a), -v)
            np.add.at(d, (hi + 1, b), v)
        return d.cumsum(0).cumsum(1)[:positions, :tiles]


def _timeline(
    ir: ModelIR, m: Mapping, tl: Timeline, tiles: int, tpi: int, budget: int, tgt, code: _Rects
) -> tuple[list[InstructionCost], np.ndarray, np.ndarray, np.ndarray]:
    """Costs and the (activations, io, temporaries) live bytes [position, global tile]."""
    act, io, tmp = _Rects(), _Rects(), _Rects()
    for s, segs in live_segments(ir, m, tl).items():
        slot = m.slots[s]
        runs = slot.tile_map.rects(tpi)
        for lo, hi, anchor in segs:
            (io if anchor else act).add(lo, hi, runs)
    costs: list[InstructionCost] = []
    for pos, step in enumerate(tl.steps, start=1):
        cost, work, temps = instruction_cost(ir, m, step, tgt, budget)
        costs.append(cost)
        code.add(0, 0, [(a, b, CODE_BYTES_PER_INSTRUCTION) for a, b in work])
        tmp.add(pos, pos, temps)
    n = len(tl.steps) + 2
    return costs, act.dense(n, tiles), io.dense(n, tiles), tmp.dense(n, tiles)


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

    weights, io_buf, code = _Rects(), _Rects(), _Rects()
    for slot in m.slots:
        if slot.category == WEIGHTS:
            weights.add(0, 0, slot.tile_map.rects(tpi))
    for _, tm in m.io_buffers:
        io_buf.add(0, 0, tm.rects(tpi, STREAM_BUFFERS))

    peak = np.full(tiles, -1, np.int64)
    dyn = {k: np.zeros(tiles, np.int64) for k in ("activations", "io", "temporaries")}
    costs: list[InstructionCost] = []
    program_cycles: dict[int, int] = {}
    host_bytes = 0
    cols = np.arange(tiles)
    for tl in m.timelines:
        c, act, io, tmp = _timeline(ir, m, tl, tiles, tpi, budget, tgt, code)
        costs += c
        for cost in c:
            program_cycles[cost.program] = program_cycles.get(cost.program, 0) + cost.cycles
        host_bytes = max(host_bytes, _host_bytes(ir, tl.anchors))
        total = act + io + tmp
        at = total.argmax(0)
        best = total[at, cols]
        better = best > peak
        peak = np.where(better, best, peak)
        for k, arr in (("activations", act), ("io", io), ("temporaries", tmp)):
            dyn[k] = np.where(better, arr[at, cols], dyn[k])
    for pid in ir.main_programs:
        program_cycles.setdefault(pid, 0)

    cats = {
        "weights": weights.dense(1, tiles)[0],
        "activations": dyn["activations"],
        "io": dyn["io"] + io_buf.dense(1, tiles)[0],
        "temporaries": dyn["temporaries"],
        "code": code.dense(1, tiles)[0],
    }
    shape = (ir.num_ipus, tpi)
    categories = {k: v.reshape(shape) for k, v in cats.items()}
    memory = sum(categories.values()).reshape(shape)  # type: ignore[union-attr]

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
        throughput=throughput,
    )
