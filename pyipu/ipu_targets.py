"""The virtual IPU targets: every hardware constant pyipu uses, in one table.

Field names follow the public members of Poplar's `poplar::IPUModel` where one exists
(tilesPerIPU → tiles_per_ipu, memoryBytesPerTile → memory_bytes_per_tile, tileClockFrequency →
tile_clock_frequency, numWorkerContexts → num_worker_contexts, exchangeBytesPerCycle →
exchange_bytes_per_cycle, memcpyBytesPerCycle → memcpy_bytes_per_cycle). The others are pyipu's
and derived from Graphcore's published figures (docs/ipu-model.md shows the arithmetic).

This module imports nothing else from pyipu, so the runtime can read it without the compiler.

Example:
    >>> from pyipu.ipu_targets import target
    >>> t = target("ipu2")
    >>> t.tiles_per_ipu, t.memory_bytes_per_tile, t.tile_clock_frequency
    (1472, 638976, 1330000000.0)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IPUTarget:
    """One IPU version's constants (one IPU; multi-IPU devices repeat them)."""

    ipu_version: str  # PopRT's string: "ipu2" | "ipu21"
    ipu_version_number: int  # PopEF METADATA's integer: 2 | 21
    chip: str
    tiles_per_ipu: int
    memory_bytes_per_tile: int
    tile_clock_frequency: float  # Hz
    num_worker_contexts: int  # hardware threads per tile
    exchange_bytes_per_cycle: int  # per tile, receiving, over the all-to-all IPU-Exchange
    memcpy_bytes_per_cycle: int  # per tile, a copy inside the tile's memory
    vector_bytes: int  # SIMD width of the non-AMP arithmetic (64-bit: 2 fp32 / 4 fp16)
    fp32_flops_per_cycle: int  # per tile, AMP (matrix) units
    fp16_flops_per_cycle: int
    fp8_flops_per_cycle: int  # 0: no FP8 arithmetic
    sync_cycles: int  # one on-chip BSP barrier (per compute set)
    inter_ipu_sync_cycles: int  # one BSP barrier spanning IPUs
    ipu_link_bytes_per_second: float  # between two IPUs of a device, one direction
    host_link_bytes_per_second: float  # PCIe Gen4 x16, one direction

    @property
    def compute_memory_bytes(self) -> int:
        """In-Processor-Memory of one IPU (all tiles)."""
        return self.tiles_per_ipu * self.memory_bytes_per_tile

    @property
    def supports_fp8(self) -> bool:
        return self.fp8_flops_per_cycle > 0


_GC200 = IPUTarget(
    ipu_version="ipu2",
    ipu_version_number=2,
    chip="GC200 (IPU-M2000)",
    tiles_per_ipu=1472,
    memory_bytes_per_tile=624 * 1024,
    tile_clock_frequency=1.33e9,
    num_worker_contexts=6,
    exchange_bytes_per_cycle=4,  # 8 TB/s ÷ (1472 tiles × 1.33 GHz) ≈ 4.1
    memcpy_bytes_per_cycle=8,
    vector_bytes=8,
    fp32_flops_per_cycle=32,  # × 1472 × 1.33 GHz ≈ 62.6 TFLOPS
    fp16_flops_per_cycle=128,  # × 1472 × 1.33 GHz ≈ 250.6 TFLOPS
    fp8_flops_per_cycle=0,
    sync_cycles=150,
    inter_ipu_sync_cycles=1000,
    ipu_link_bytes_per_second=64e9,  # two of the ten 32 GB/s IPU-Links
    host_link_bytes_per_second=32e9,  # half of PCIe Gen4 x16's 64 GB/s bidirectional
)

TARGETS: dict[str, IPUTarget] = {
    "ipu2": _GC200,
    "ipu21": IPUTarget(
        **{
            **_GC200.__dict__,
            "ipu_version": "ipu21",
            "ipu_version_number": 21,
            "chip": "C600",
            "tile_clock_frequency": 1.5e9,
            "fp8_flops_per_cycle": 256,  # × 1472 × 1.5 GHz ≈ 565 TFLOPS FP8
        }
    ),
}

TILES_PER_IPU = _GC200.tiles_per_ipu  # the same for every target


def target(version: str | int = "ipu2") -> IPUTarget:
    """The target of a PopRT version string ("ipu2", "ipu21"; "" = "ipu2") or PopEF number."""
    for t in TARGETS.values():
        if version in (t.ipu_version, t.ipu_version_number):
            return t
    if version == "":
        return _GC200
    raise KeyError(f"unknown IPU version {version!r}; known: {sorted(TARGETS)}")
