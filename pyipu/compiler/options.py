"""CompilerOptions: PopRT's option names and defaults (poprt.compiler.CompilerOptions).

Every assignment is validated, so a typo or a bad value fails where it is written. Options that
only tune Poplar's performance are accepted and recorded (they cannot change results here).
Options that would change what is computed and that pyipu does not implement raise
UnsupportedError when set to anything but their default, rather than being ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pyipu.compiler.errors import CompileError, UnsupportedError
from pyipu.compiler.ipu_model import allow_out_of_memory
from pyipu.compiler.ir import IPU_VERSIONS
from pyipu.compiler.serialize import CACHE_BLOB, PACKED_BLOB
from pyipu.ipu_targets import TILES_PER_IPU


def _int_at_least(lo: int) -> Callable[[str, Any], None]:
    def check(name: str, v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise CompileError(f"CompilerOptions.{name} must be an integer >= {lo}, got {v!r}")

    return check


def _boolean(name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise CompileError(f"CompilerOptions.{name} must be a bool, got {v!r}")


def _number(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CompileError(f"CompilerOptions.{name} must be a number, got {v!r}")


def _string(name: str, v: Any) -> None:
    if not isinstance(v, str):
        raise CompileError(f"CompilerOptions.{name} must be a str, got {v!r}")


def _ipu_version(name: str, v: Any) -> None:
    # "" is PopRT's "auto-detect"; pyipu's virtual device is an ipu2 then.
    if v != "" and v not in IPU_VERSIONS:
        raise CompileError(f"CompilerOptions.{name} must be 'ipu2' or 'ipu21', got {v!r}")


def _partials_type(name: str, v: Any) -> None:
    if v not in ("float", "half"):
        raise CompileError(f"CompilerOptions.{name} must be 'float' or 'half', got {v!r}")


def _proportion(name: str, v: Any) -> None:
    _number(name, v)
    if not 0.0 < v <= 1.0:
        raise CompileError(f"CompilerOptions.{name} must be in (0, 1], got {v!r}")


def _num_io_tiles(name: str, v: Any) -> None:
    if v == "auto":  # sized from the model's I/O bytes at compile time
        return
    _int_at_least(0)(name, v)
    if v >= TILES_PER_IPU:
        raise CompileError(f"CompilerOptions.{name} must be < {TILES_PER_IPU} (tiles per IPU)")


def _virtual_graph_mode(name: str, v: Any) -> None:
    if v == "auto":
        raise UnsupportedError(
            f"CompilerOptions.{name}='auto' is not supported by pyipu (no automatic sharding); "
            "use 'manual' with node placements (pyipu.compiler.Sharder)"
        )
    if v not in ("off", "manual"):
        raise CompileError(f"CompilerOptions.{name} must be 'off' or 'manual', got {v!r}")


def _mapping(name: str, v: Any) -> None:
    if not isinstance(v, Mapping):
        raise CompileError(f"CompilerOptions.{name} must be a dict, got {v!r}")


def _engine_options(name: str, v: Any) -> None:
    _mapping(name, v)
    allow_out_of_memory(v)  # the one Poplar engine option pyipu reads: check its value now


def _opaque_blobs(name: str, v: Any) -> None:
    _mapping(name, v)
    for k, payload in v.items():
        if not isinstance(k, str) or not 1 <= len(k.encode()) <= 255:
            raise CompileError(
                f"CompilerOptions.{name}: blob names must be 1..255 bytes, got {k!r}"
            )
        if not isinstance(payload, (str, bytes)):
            raise CompileError(f"CompilerOptions.{name}[{k!r}] must be str or bytes")
        if k in (PACKED_BLOB, CACHE_BLOB):
            raise CompileError(f"CompilerOptions.{name}: {k!r} is reserved for pyipu's own use")


def _logger(name: str, v: Any) -> None:
    if v is not None and not callable(v):
        raise CompileError(f"CompilerOptions.{name} must be None or a callable(progress, max)")


def _only_default(default: Any, why: str) -> Callable[[str, Any], None]:
    def check(name: str, v: Any) -> None:
        if v != default:
            raise UnsupportedError(
                f"CompilerOptions.{name}={v!r} is not supported by pyipu ({why}); "
                f"leave it at {default!r}"
            )

    return check


_VALIDATORS: dict[str, Callable[[str, Any], None]] = {
    "num_ipus": _int_at_least(1),
    "replication_factor": _int_at_least(1),
    "ipu_version": _ipu_version,
    "batches_per_step": _int_at_least(1),
    "partials_type": _partials_type,
    "available_memory_proportion": _proportion,
    "num_io_tiles": _num_io_tiles,
    "enable_model_fusion": _boolean,
    "enable_prefetch_datastreams": _boolean,
    "stream_buffering_depth": _int_at_least(1),
    "group_host_sync": _boolean,
    "rearrange_streams_on_host": _boolean,
    "rearrange_anchors_on_host": _boolean,
    "create_host_transferable_tensor_with_offset": _boolean,
    "enable_efficient_overlap_io_topo_cons": _boolean,
    "enable_outlining": _boolean,
    "outline_threshold": _number,
    "enable_multi_stage_reduce": _boolean,
    "enable_fast_reduce": _boolean,
    "use_128bit_conv_unit_load": _boolean,
    "enable_non_stable_softmax": _only_default(False, "softmax always subtracts the max"),
    "enable_pad_conv_channel": _boolean,
    "enable_gather_simplifier": _boolean,
    "subgraph_copying_strategy": _int_at_least(0),
    "virtual_graph_mode": _virtual_graph_mode,
    "virtual_graph_split_ratios": _only_default([], "no automatic sharding"),
    "enable_pipelining": _boolean,
    "time_limit_scheduler": _number,
    "swap_limit_scheduler": _number,
    "transitive_closure_optimization_threshold": _int_at_least(0),
    "constant_weights": _boolean,
    "enable_engine_caching": _boolean,
    "cache_path": _string,
    "engine_options": _engine_options,
    "custom_patterns": _only_default([], "no custom PopART patterns"),
    "custom_transform_applier_settings": _only_default({}, "no custom PopART transforms"),
    "opaque_blobs": _opaque_blobs,
    "serialize_ir": _boolean,
    "serialized_ir_dest": _string,
    "show_compilation_progress_bar": _boolean,
    "compilation_progress_logger": _logger,
}


@dataclass
class CompilerOptions:
    """Options of `Compiler.compile` (PopRT 1.5 names and defaults).

    Implemented: ipu_version, num_ipus (recorded), replication_factor (PopART's replicated
    graphs: the Runner runs one replica per virtual IPU), batches_per_step, num_io_tiles (the
    runtime overlaps I/O when > 0; "auto" sizes it from the model's I/O bytes), opaque_blobs,
    enable_engine_caching/cache_path, serialize_ir/serialized_ir_dest,
    compilation_progress_logger, virtual_graph_mode ("off" or "manual": nodes placed by their
    `__ipu_number` / `__pipeline_stage` attributes, see docs/runtime.md), enable_pipelining
    (needs "manual" and batches_per_step a multiple of the stage count),
    available_memory_proportion and engine option `debug.allowOutOfMemory` (the IPU Model,
    docs/ipu-model.md). partials_type: pyipu always
    accumulates floats in float32 (both values accepted). Poplar tuning knobs are recorded only.

    Example:
        >>> opts = CompilerOptions()
        >>> opts.batches_per_step = 16
        >>> CompilerOptions.from_dict({"num_io_tiles": 128}).num_io_tiles
        128
    """

    num_ipus: int = 1
    replication_factor: int = 1
    ipu_version: str = "ipu2"
    batches_per_step: int = 1
    partials_type: str = "half"
    available_memory_proportion: float = 0.6
    num_io_tiles: int | Literal["auto"] = 0
    enable_model_fusion: bool = False
    enable_prefetch_datastreams: bool = True
    stream_buffering_depth: int = 1
    group_host_sync: bool = False
    rearrange_streams_on_host: bool = False
    rearrange_anchors_on_host: bool = True
    create_host_transferable_tensor_with_offset: bool = False
    enable_efficient_overlap_io_topo_cons: bool = False
    enable_outlining: bool = True
    outline_threshold: float = 1.0
    enable_multi_stage_reduce: bool = True
    enable_fast_reduce: bool = False
    use_128bit_conv_unit_load: bool = False
    enable_non_stable_softmax: bool = False
    enable_pad_conv_channel: bool = False
    enable_gather_simplifier: bool = True
    subgraph_copying_strategy: int = 0
    virtual_graph_mode: str = "off"
    virtual_graph_split_ratios: list[float] = field(default_factory=list)
    enable_pipelining: bool = False
    time_limit_scheduler: float = 1e9
    swap_limit_scheduler: float = 1e9
    transitive_closure_optimization_threshold: int = 100000
    constant_weights: bool = True
    enable_engine_caching: bool = False
    cache_path: str = ""
    engine_options: dict[str, str] = field(default_factory=dict)
    custom_patterns: list[str] = field(default_factory=list)
    custom_transform_applier_settings: dict[str, str] = field(default_factory=dict)
    opaque_blobs: dict[str, str | bytes] = field(default_factory=dict)
    serialize_ir: bool = False
    serialized_ir_dest: str = ""
    show_compilation_progress_bar: bool = True
    compilation_progress_logger: Callable[[int, int], None] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        check = _VALIDATORS.get(name)
        if check is None:
            raise AttributeError(
                f"CompilerOptions has no option {name!r}; known options: {sorted(_VALIDATORS)}"
            )
        check(name, value)
        object.__setattr__(self, name, value)

    @property
    def ipu_version_number(self) -> int:
        """METADATA ipu_version: 2 (GC200, "ipu2") or 21 (C600, "ipu21")."""
        return IPU_VERSIONS[self.ipu_version or "ipu2"]

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> CompilerOptions:
        opts = cls()
        for k, v in options.items():
            setattr(opts, k, v)
        return opts

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
