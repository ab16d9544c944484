"""`%ipu compile`: convert (precision, shapes) and compile with a progress bar and a summary."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .summary import executable_html
from .widgets import CompileProgress


def compiler_options(args: argparse.Namespace, logger: Callable[[int, int], None] | None) -> Any:
    """CompilerOptions from the shared compile/fuse options."""
    from pyipu.compiler import CompilerOptions

    opts = CompilerOptions()
    opts.batches_per_step = args.batches_per_step
    opts.num_io_tiles = args.num_io_tiles
    opts.ipu_version = args.ipu_version
    opts.available_memory_proportion = args.available_memory_proportion
    if args.allow_out_of_memory:
        opts.engine_options = {"debug.allowOutOfMemory": "true"}
    opts.show_compilation_progress_bar = False
    opts.compilation_progress_logger = logger
    return opts


def convert(model: Any, args: argparse.Namespace) -> Any:
    """Apply the Converter when a conversion option was given (else the model as it is)."""
    if args.precision == "fp32" and not args.input_shape and args.batch_size is None:
        return model
    from IPython.core.error import UsageError

    from pyipu import Converter
    from pyipu.errors import ShapeError

    try:
        return Converter(
            precision=args.precision, input_shape=args.input_shape, batch_size=args.batch_size
        ).convert(model)
    except ShapeError as e:  # names or dims the line gave: a usage error, not a traceback
        if args.input_shape or args.batch_size is not None:
            raise UsageError(str(e)) from None
        raise


def compile_with_progress(
    model: Any,
    outputs: list[str] | None,
    args: argparse.Namespace,
    title: str,
    show: Callable[..., Any] | None,
    extra_html: Callable[[Any], str] = lambda exe: "",
) -> Any:
    """Compile (and save to `args.output`); `show` displays the progress bar, which is then
    followed by `extra_html(exe)` and the executable's summary (None: quiet)."""
    from pyipu.compiler import Compiler

    progress = CompileProgress(title) if show is not None else None
    if progress is not None and show is not None:
        progress.live.show(show)
    try:
        exe = Compiler.compile(model, outputs, compiler_options(args, progress))
    except Exception as e:
        if progress is not None:
            progress.failed(f"{type(e).__name__}: {e}")
        raise
    if args.output:
        exe.save(args.output)
    if progress is not None:
        progress.done(extra_html(exe) + executable_html(exe, title))
    return exe


def compile_model(
    model: Any, args: argparse.Namespace, title: str, show: Callable[..., Any] | None
) -> Any:
    """`%ipu compile`: the Executable of the (converted) model."""
    return compile_with_progress(convert(model, args), args.outputs, args, title, show)
