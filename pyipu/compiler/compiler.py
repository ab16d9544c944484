"""Compiler: ONNX model → Executable (poprt.compiler.Compiler).

Pipeline: onnx_import (load, shape inference, constant folding) → lower (ops.py registry, one
instruction list per subgraph) → memory (arena plan, tensor data, Load/Main programs) → ModelIR,
wrapped in an Executable. A model produced by `fusion.fuse_models` (metadata key "pyipu.fusion")
compiles to one Main program per fused model plus the `index` input anchor.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import onnx

from pyipu.compiler.cache import cache_dir, cached_compile
from pyipu.compiler.errors import CompileError
from pyipu.compiler.executable import Executable
from pyipu.compiler.io_tiles import auto_num_io_tiles, streamed_bytes
from pyipu.compiler.ipu_model import Settings, allow_out_of_memory, check_fits, estimate
from pyipu.compiler.ir import ModelIR
from pyipu.compiler.lower import GraphBuilder, add_index_anchor, lower_subgraph
from pyipu.compiler.memory import build_ir
from pyipu.compiler.model_fusion import FUSION_KEY, read_fusion_info
from pyipu.compiler.onnx_import import ModelLike, import_model, load_model
from pyipu.compiler.ops import REGISTRY
from pyipu.compiler.options import CompilerOptions
from pyipu.compiler.rewrites.affine import fuse_affine_chains
from pyipu.compiler.rewrites.concat_inplace import concat_in_place
from pyipu.compiler.rewrites.conv_epilogue import fuse_conv_epilogues
from pyipu.compiler.rewrites.conv_taps import trim_dead_taps
from pyipu.compiler.rewrites.expand import drop_broadcast_expands
from pyipu.compiler.rewrites.gelu import fuse_gelu
from pyipu.compiler.rewrites.linear import fuse_linear
from pyipu.compiler.rewrites.swish import fuse_swish
from pyipu.compiler.staging import (
    Placement,
    output_stages,
    place_nodes,
    split_stages,
    stage_callback,
)
from pyipu.compiler.variables import make_variables, read_variables, weights_as_inputs
from pyipu.errors import CallbackError, Error

_STEPS = 4


def compile_ir(
    model: ModelLike, outputs: Sequence[str] | None = None, options: CompilerOptions | None = None
) -> ModelIR:
    """Compile to a ModelIR (what Compiler.compile wraps in an Executable)."""
    opts = _check_options(options)
    try:
        return _compile_ir(model, outputs, opts)
    except BaseException as e:
        if opts.compilation_progress_logger is None and opts.show_compilation_progress_bar:
            _progress_bar_end()
        if isinstance(e, Exception) and not isinstance(e, Error):
            # A malformed model reached a check the compiler lacks: still a typed error, with
            # the original kept as __cause__ (a compiler bug shows there).
            raise CompileError(f"the model cannot be compiled: {type(e).__name__}: {e}") from e
        raise


def _compile_ir(model: ModelLike, outputs: Sequence[str] | None, opts: CompilerOptions) -> ModelIR:
    _progress(opts, 0)
    proto = load_model(model)
    variables = read_variables(proto)
    if variables:
        proto, initial = weights_as_inputs(proto, variables)
    graph = import_model(proto)
    _progress(opts, 1)
    fusion = read_fusion_info(graph.model)
    opaque = [
        (k, v.encode() if isinstance(v, str) else bytes(v)) for k, v in opts.opaque_blobs.items()
    ]
    if outputs is not None and (isinstance(outputs, str) or not outputs):
        raise CompileError(f"outputs must be None or a non-empty list of names, got {outputs!r}")

    placement = _placement(graph.nodes, opts, fusion is not None, bool(variables))
    if variables and fusion is not None:
        raise CompileError("variables are not supported in fused models")
    if fusion is None:
        builder = GraphBuilder(1, constant_weights=opts.constant_weights)
        requested = list(outputs or graph.graph_outputs)
        lowered = requested + [u for u in variables.values() if u not in requested]
        lower_subgraph(
            builder,
            graph,
            0,
            graph.inputs,
            lowered,
            REGISTRY,
            stage_callback(placement),
            None
            if placement is None
            else output_stages(graph.nodes, placement, lowered, variables.values()),
        )
        if variables:
            make_variables(builder, variables, initial, set(requested))
        index_name = None
    else:
        builder = GraphBuilder(len(fusion.subgraphs), constant_weights=opts.constant_weights)
        specs = {s.name: s for s in graph.inputs}
        wanted = set(outputs) if outputs is not None else None
        owned = {o for sub in fusion.subgraphs for o in sub.outputs}
        if wanted is not None and wanted - owned:
            raise CompileError(f"outputs {sorted(wanted - owned)} belong to no fused subgraph")
        for i, sub in enumerate(fusion.subgraphs):
            outs = [o for o in sub.outputs if wanted is None or o in wanted]
            lower_subgraph(builder, graph, i, [specs[n] for n in sub.inputs], outs, REGISTRY)
        add_index_anchor(builder, fusion.index)
        index_name = fusion.index
        opaque.append((FUSION_KEY, fusion.to_json().encode()))
    fuse_gelu(builder)  # before the epilogues: a convolution's GELU or SiLU fuses into it
    fuse_swish(builder)
    fuse_linear(builder)  # before the epilogues too: a Linear layer's activation fuses into it
    fuse_conv_epilogues(builder)
    trim_dead_taps(builder)  # after BatchNorm folding: the weights are final
    fuse_affine_chains(builder)
    drop_broadcast_expands(builder)
    if placement is None:  # manual sharding: stages exchange whole tensors (staging.py)
        concat_in_place(builder)
    _progress(opts, 2)
    plan = None
    if placement is not None:
        plan = split_stages(builder, placement.stage_ipus, placement.step_end)
    ir = build_ir(
        builder,
        index_name=index_name,
        ipu_version=opts.ipu_version_number,
        num_ipus=opts.num_ipus,
        batches_per_step=opts.batches_per_step,
        num_io_tiles=1 if opts.num_io_tiles == "auto" else opts.num_io_tiles,
        opaque=tuple(opaque),
        plan=plan,
        pipelined=opts.enable_pipelining,
    )
    io_tiles = ir.num_io_tiles
    if opts.num_io_tiles == "auto":
        io_tiles = auto_num_io_tiles(streamed_bytes(ir))
    ir = dataclasses.replace(ir, replication_factor=opts.replication_factor, num_io_tiles=io_tiles)
    ir = _fit_on_ipu(ir, opts)
    _progress(opts, 3)
    if opts.serialize_ir:
        _write_ir(ir, opts.serialized_ir_dest)
    _progress(opts, _STEPS)
    return ir


def _fit_on_ipu(ir: ModelIR, opts: CompilerOptions) -> ModelIR:
    """Record the IPU Model settings in the IR; IPUOutOfMemoryError if the model does not fit."""
    settings = Settings(opts.available_memory_proportion, allow_out_of_memory(opts.engine_options))
    blob = settings.blob()
    if blob is not None:
        ir = dataclasses.replace(ir, opaque=(*ir.opaque, blob))
    check_fits(estimate(ir, settings))
    return ir


def _check_options(options: CompilerOptions | None) -> CompilerOptions:
    if options is None:
        return CompilerOptions()
    if not isinstance(options, CompilerOptions):
        raise CompileError(f"options must be a CompilerOptions, got {type(options).__name__}")
    return options


def _placement(
    nodes: Sequence[onnx.NodeProto], opts: CompilerOptions, fused: bool, trains: bool
) -> Placement | None:
    """The manual sharding of the model, validated against the options (None: not sharded).
    A model with variables (training) runs any number of batches per step through its
    pipeline; inference keeps PopRT's rule of a multiple of the number of stages."""
    if opts.enable_pipelining and opts.virtual_graph_mode != "manual":
        raise CompileError("enable_pipelining needs virtual_graph_mode='manual'")
    if opts.virtual_graph_mode != "manual":
        return None
    if fused:
        raise CompileError("manual sharding of a fused model (model_fusion) is not supported")
    if opts.num_io_tiles != 0:
        raise CompileError(
            "manual sharding with overlap I/O (num_io_tiles != 0) is not supported; set "
            "num_io_tiles=0"
        )
    placement = place_nodes(nodes, opts.num_ipus, opts.enable_pipelining)
    if opts.enable_pipelining and not trains and opts.batches_per_step % placement.num_stages:
        raise CompileError(
            f"with enable_pipelining, batches_per_step ({opts.batches_per_step}) must be a "
            f"multiple of the number of pipeline stages ({placement.num_stages})"
        )
    return placement


_STEP_NAMES = ("importing", "lowering", "planning memory", "finishing", "done")


def _progress(opts: CompilerOptions, step: int) -> None:
    """PopRT's progress reporting: the logger if set, else a bar on an interactive stderr."""
    if opts.compilation_progress_logger is not None:
        try:
            opts.compilation_progress_logger(step, _STEPS)
        except Exception as e:  # the caller's code failed, not the model
            raise CallbackError(
                f"compilation_progress_logger raised {type(e).__name__}: {e}", type="ERR_CALLBACK"
            ) from e
    elif opts.show_compilation_progress_bar and sys.stderr.isatty():
        bar = "#" * (step * 20 // _STEPS)
        end = "\n" if step >= _STEPS else ""
        sys.stderr.write(f"\rCompiling [{bar:<20}] {step}/{_STEPS} {_STEP_NAMES[step]:<16}{end}")
        sys.stderr.flush()


def _progress_bar_end() -> None:
    """End a bar cut short by an error, so the traceback starts on its own line."""
    if sys.stderr.isatty():
        sys.stderr.write("\n")


def _write_ir(ir: ModelIR, dest: str) -> None:
    if dest:
        Path(dest).write_text(ir.summary() + "\n")
    else:
        sys.stdout.write(ir.summary() + "\n")


class Compiler:
    """PopRT's compiler entry points (all static)."""

    @staticmethod
    def compile(
        model: ModelLike,
        outputs: Sequence[str] | None = None,
        options: CompilerOptions | None = None,
    ) -> Executable:
        """Compile an ONNX model (bytes, file name or ModelProto) for the requested outputs.

        `outputs=None` means every graph output (the form used for fused models).
        """
        opts = _check_options(options)
        directory = cache_dir(opts)
        if directory is None:
            return Executable.from_program(compile_ir(model, outputs, opts))
        exe, hit = cached_compile(
            directory,
            model,
            outputs,
            opts,
            lambda: Executable.from_program(compile_ir(model, outputs, opts)),
        )
        if hit and opts.serialize_ir:
            _write_ir(exe.program, opts.serialized_ir_dest)
        return exe

    @staticmethod
    def compile_and_export(
        model: ModelLike,
        outputs: Sequence[str] | None,
        filename: str | os.PathLike | IO[bytes],
        options: CompilerOptions | None = None,
    ) -> None:
        """Compile and write the PopEF file (a path or a binary stream)."""
        exe = Compiler.compile(model, outputs, options)
        if hasattr(filename, "write"):
            filename.write(exe.to_bytes())
        else:
            exe.save(filename)

    @staticmethod
    def compile_and_get_summary_report(
        model: ModelLike,
        outputs: Sequence[str] | None,
        options: CompilerOptions | None = None,
        reset_profile: bool = True,
    ) -> str:
        """The IPU Model's text report (IPUModelReport.summary): target, per-tile memory by
        category, worst tiles, largest tensors, cycles per instruction, latency, throughput."""
        del reset_profile  # there is no profiler state to reset
        return estimate(compile_ir(model, outputs, options)).summary()
