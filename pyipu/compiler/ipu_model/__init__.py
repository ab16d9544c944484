"""The IPU Model: tile mapping, per-tile memory, cycle estimates and reports (docs/ipu-model.md).

Example:
    >>> from pyipu.compiler import Compiler
    >>> exe = Compiler.compile(model, ["y"])  # doctest: +SKIP
    >>> print(exe.report().summary())  # doctest: +SKIP
"""

from pyipu.compiler.errors import CompileError, IPUOutOfMemoryError
from pyipu.compiler.ipu_model.cycles import InstructionCost
from pyipu.compiler.ipu_model.estimate import SETTINGS_BLOB, Settings, estimate
from pyipu.compiler.ipu_model.report import NOT_FIT_LABEL, IPUModelReport, TensorMemory

ALLOW_OOM_OPTION = "debug.allowOutOfMemory"  # Poplar engine option


def allow_out_of_memory(engine_options: dict[str, str]) -> bool:
    """Poplar's `debug.allowOutOfMemory` engine option ("true"/"false"; bools accepted)."""
    v = engine_options.get(ALLOW_OOM_OPTION, "false")
    text = str(v).lower()
    if text not in ("true", "false"):
        raise CompileError(
            f"engine option {ALLOW_OOM_OPTION!r} must be 'true' or 'false', got {v!r}"
        )
    return text == "true"


def out_of_memory_message(rep: IPUModelReport, top: int = 5) -> str:
    t = rep.target
    cap = t.memory_bytes_per_tile
    over = int((rep.memory > cap).sum())
    tiles = "; ".join(
        f"tile {tile} of IPU {ipu}: {b} bytes used, {cap} available"
        for ipu, tile, b in rep.worst_tiles(top)
    )
    tensors = "; ".join(
        f"{tm.name!r} {tm.nbytes} bytes ({tm.category}, up to {tm.max_bytes_per_tile} per tile)"
        for tm in rep.tensors[:top]
    )
    ipu, tile, _ = rep.worst_tiles(1)[0]
    temp = int(rep.categories["temporaries"][ipu, tile])
    amp = (
        f"lower available_memory_proportion (now {rep.available_memory_proportion}: MatMul/Conv "
        f"temporaries take {temp} bytes of tile {tile}), "
        if temp
        else ""
    )
    return (
        f"out of memory on the IPU ({t.ipu_version}: {rep.num_ipus} IPU(s) x {t.tiles_per_ipu} "
        f"tiles x {cap} bytes): {over} tile(s) over. Worst tiles: {tiles}. Largest tensors: "
        f"{tensors}. To fit: {amp}reduce the batch size, shard over more IPUs; or set "
        f"options.engine_options = {{{ALLOW_OOM_OPTION!r}: 'true'}} to compile anyway for CPU use"
    )


def check_fits(rep: IPUModelReport) -> None:
    """IPUOutOfMemoryError unless the model fits or out-of-memory compilation was allowed."""
    if not rep.fits and not rep.allow_out_of_memory:
        raise IPUOutOfMemoryError(out_of_memory_message(rep), rep)


__all__ = [
    "ALLOW_OOM_OPTION",
    "NOT_FIT_LABEL",
    "SETTINGS_BLOB",
    "IPUModelReport",
    "IPUOutOfMemoryError",
    "InstructionCost",
    "Settings",
    "TensorMemory",
    "allow_out_of_memory",
    "check_fits",
    "estimate",
    "out_of_memory_message",
]
