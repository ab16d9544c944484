"""IPUModelReport: the IPU Model's memory and cycle estimate of an executable, and its text form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyipu.compiler.ipu_model.cycles import InstructionCost
from pyipu.ipu_targets import IPUTarget

NOT_FIT_LABEL = "does not fit on the IPU (compiled for CPU use)"
CATEGORIES = ("weights", "activations", "io", "temporaries", "code")


@dataclass(frozen=True)
class TensorMemory:
    """One tensor's storage (a root and its views), for the largest-tensor lists."""

    name: str
    category: str
    nbytes: int
    tiles: int
    ipu: int
    max_bytes_per_tile: int


@dataclass(frozen=True, eq=False)
class Liveness:
    """Bytes live over one timeline (a Main program, or a sharded model's stages in order),
    summed over every tile, per category. Position 0 is before the first instruction, i + 1
    while `instructions[i]` runs, the last after the last one."""

    programs: tuple[int, ...]
    instructions: tuple[InstructionCost, ...] = field(repr=False)
    bytes: dict[str, np.ndarray] = field(repr=False)  # CATEGORIES -> one value per position

    @property
    def total(self) -> np.ndarray:
        return sum(self.bytes.values(), start=np.zeros(len(self.instructions) + 2, np.int64))


@dataclass(frozen=True, eq=False)
class IPUModelReport:
    """What the IPU Model estimates for an executable (see docs/ipu-model.md).

    `memory[ipu, tile]` is each tile's peak bytes; `categories[name]` splits it exactly
    (weights, activations, io, temporaries, code: the dynamic ones taken at the tile's peak), so
    `sum(categories.values()) == memory`. Cycles are per batch on one replica. `liveness`:
    the bytes live over each program, summed over the tiles (PopVision's liveness report).

    Example:
        >>> rep = exe.report()  # doctest: +SKIP
        >>> rep.fits, rep.memory.shape, rep.latency_s  # doctest: +SKIP
        (True, (1, 1472), 2.1e-05)
    """

    target: IPUTarget
    num_ipus: int
    num_io_tiles: int
    batches_per_step: int
    replication_factor: int
    available_memory_proportion: float
    allow_out_of_memory: bool
    memory: np.ndarray = field(repr=False)
    categories: dict[str, np.ndarray] = field(repr=False)
    tensors: tuple[TensorMemory, ...] = field(repr=False)
    instructions: tuple[InstructionCost, ...] = field(repr=False)
    program_cycles: dict[int, int]
    batch_cycles: int  # compute + exchange + sync of one batch (all stages)
    host_io_cycles: int  # host transfers of one batch's streamed anchors
    step_cycles: int  # one step of batches_per_step batches, overlap and pipelining applied
    latency_s: float
    throughput: float  # batches per second (all replicas)
    liveness: tuple[Liveness, ...] = field(default=(), repr=False)  # one per timeline

    @property
    def tiles_per_ipu(self) -> int:
        return self.target.tiles_per_ipu

    @property
    def fits(self) -> bool:
        return bool((self.memory <= self.target.memory_bytes_per_tile).all())

    @property
    def total_cycles(self) -> int:
        return self.batch_cycles + self.host_io_cycles

    def worst_tiles(self, n: int = 5) -> list[tuple[int, int, int]]:
        """The n fullest tiles as (ipu, tile, bytes), fullest first (ties: lowest tile)."""
        flat = self.memory.reshape(-1)
        order = np.argsort(-flat, kind="stable")[:n]
        t = self.tiles_per_ipu
        return [(int(i) // t, int(i) % t, int(flat[i])) for i in order]

    def to_dict(self) -> dict[str, Any]:
        """Plain Python data (lists for arrays): JSON-serialisable."""
        return {
            "target": self.target.ipu_version,
            "num_ipus": self.num_ipus,
            "tiles_per_ipu": self.tiles_per_ipu,
            "num_io_tiles": self.num_io_tiles,
            "memory_bytes_per_tile": self.target.memory_bytes_per_tile,
            "batches_per_step": self.batches_per_step,
            "replication_factor": self.replication_factor,
            "available_memory_proportion": self.available_memory_proportion,
            "allow_out_of_memory": self.allow_out_of_memory,
            "fits": self.fits,
            "memory": self.memory.tolist(),
            "categories": {k: v.tolist() for k, v in self.categories.items()},
            "tensors": [t.__dict__.copy() for t in self.tensors],
            "instructions": [{**c.__dict__, "cycles": c.cycles} for c in self.instructions],
            "program_cycles": dict(self.program_cycles),
            "batch_cycles": self.batch_cycles,
            "host_io_cycles": self.host_io_cycles,
            "step_cycles": self.step_cycles,
            "latency_s": self.latency_s,
            "throughput": self.throughput,
        }

    def summary(self, top: int = 10) -> str:
        """A PopVision-style text summary."""
        t = self.target
        cap = t.memory_bytes_per_tile
        used = int(self.memory.sum())
        total = cap * t.tiles_per_ipu * self.num_ipus
        compute = t.tiles_per_ipu - self.num_io_tiles
        lines = [
            "IPU Model report",
            f"Target: {t.ipu_version} ({t.chip}), {self.num_ipus} IPU(s), "
            f"{t.tiles_per_ipu} tiles per IPU ({compute} compute + {self.num_io_tiles} I/O), "
            f"{cap} bytes per tile, {t.tile_clock_frequency / 1e9:.2f} GHz",
            "Status: " + ("fits on the IPU" if self.fits else NOT_FIT_LABEL.upper()),
            "Memory:",
            f"  total {used} bytes of {total} ({100 * used / total:.1f}%), "
            f"max tile {int(self.memory.max())} of {cap} bytes",
        ]
        for k in CATEGORIES:
            lines.append(f"  {k:<12} {int(self.categories[k].sum()):>14} bytes")
        over = int((self.memory > cap).sum())
        lines.append(f"  tiles over {cap} bytes: {over}")
        lines.append("Worst tiles:")
        for ipu, tile, b in self.worst_tiles(min(top, 5)):
            parts = ", ".join(f"{k} {int(self.categories[k][ipu, tile])}" for k in CATEGORIES)
            lines.append(f"  IPU {ipu} tile {tile}: {b} bytes ({parts})")
        lines.append("Largest tensors:")
        for tm in self.tensors[:top]:
            lines.append(
                f"  {tm.name!r} {tm.nbytes} bytes ({tm.category}) on {tm.tiles} tile(s) "
                f"of IPU {tm.ipu}, up to {tm.max_bytes_per_tile} bytes per tile"
            )
        lines.append(f"Cycles per batch: {self.batch_cycles} (+ {self.host_io_cycles} host I/O)")
        for pid, c in self.program_cycles.items():
            lines.append(f"  program {pid}: {c}")
        lines.append("Top instructions (cycles = compute + exchange + sync):")
        for ic in sorted(self.instructions, key=lambda ic: -ic.cycles)[:top]:
            passes = f" in {ic.passes} passes" if ic.passes > 1 else ""
            lines.append(
                f"  program {ic.program} #{ic.index} {ic.opcode.lower()}"
                f"{f' -> {ic.output}' if ic.output else ''}"
                f"{f' ({ic.node}: {ic.op_type})' if ic.node else ''} on {ic.tiles} tiles"
                f"{passes}: {ic.cycles} = {ic.compute_cycles} + {ic.exchange_cycles} + "
                f"{ic.sync_cycles}"
            )
        lines.append(
            f"Estimated: latency {self.latency_s * 1e3:.4f} ms per batch, throughput "
            f"{self.throughput:.1f} batches/s (batches_per_step {self.batches_per_step}, "
            f"replication {self.replication_factor}, step {self.step_cycles} cycles)"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
