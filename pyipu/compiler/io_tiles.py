"""How many I/O tiles an executable needs for overlap I/O (PopRT's rule of thumb)."""

from __future__ import annotations

from pyipu.compiler.ir import ModelIR
from pyipu.ipu_targets import target

TILE_BYTES = target("ipu2").memory_bytes_per_tile  # the same for ipu21
MAX_IO_TILES = 1024  # leave compute tiles: a power of two below the 1472 tiles per IPU


def auto_num_io_tiles(io_bytes: int) -> int:
    """Total input + output bytes of one step ÷ SRAM per tile, rounded up to a power of two."""
    tiles = max(1, -(-io_bytes // TILE_BYTES))
    return min(1 << (tiles - 1).bit_length(), MAX_IO_TILES)


def streamed_bytes(ir: ModelIR) -> int:
    """Bytes of every input and output anchor a step moves (weights excluded)."""
    per_batch = sum(ir.tensors[a.tensor].nbytes for a in ir.anchors if not a.has_tensor_data)
    return per_batch * ir.batches_per_step
