"""The `%ipu` / `%%ipu` magic: parses the line and dispatches to one module per verb."""

from __future__ import annotations

import argparse
import os
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, needs_local_scope
from IPython.display import display

from . import args as A
from . import sources


@magics_class
class IpuMagics(Magics):
    """`%ipu VERB ...` / `%%ipu VERB ...` (docs/notebooks.md).

    Example (in a notebook):
        %load_ext pyipu.magics
        exe = %ipu compile model.onnx --batches-per-step 4
        res = %ipu run exe --seconds 5 --record
        %ipu profile exe --run res
    """

    @needs_local_scope
    @line_cell_magic
    def ipu(self, line: str = "", cell: str | None = None, local_ns: Any = None) -> Any:
        try:
            ns = A.parse(line)
        except A.HelpShown:
            return None
        scope = {**self.shell.user_ns, **(local_ns or {})}
        return getattr(self, f"_{ns.verb}")(ns, cell, scope)

    ipu.__doc__ = A.full_help()

    # --- verbs -----------------------------------------------------------------------------
    def _devices(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .devices import devices

        _no_cell(ns, cell)
        return devices()

    def _compile(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .compile import compile_model

        _no_cell(ns, cell)
        model = sources.model(ns.model, scope)
        return compile_model(model, ns, f"%ipu compile {ns.model}", None if ns.quiet else display)

    def _fuse(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .fuse import fuse

        return fuse(cell, ns, scope, None if ns.quiet else display)

    def _compare(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .compare import compare
        from .run import RunResult

        _no_cell(ns, cell)
        first = sources.lookup(ns.items[0], scope)
        if isinstance(first, RunResult):
            items = []
            for name in ns.items:
                value = sources.lookup(name, scope)
                if not isinstance(value, RunResult):
                    raise UsageError(f"{name}: not a RunResult, as {ns.items[0]} is")
                items.append((name, value))
        else:  # executables: an Executable, a FuseResult, PopEF bytes or a path
            items = [(name, sources.executable(name, scope)) for name in ns.items]
        return compare(items)

    def _dump(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .dump import dump

        _no_cell(ns, cell)
        value = sources.lookup(ns.file, scope)
        if not isinstance(value, (str, os.PathLike)):
            value = sources.executable(ns.file, scope)
        return dump(ns.file, value, ns.instructions)

    def _profile(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .profile import profile
        from .run import RunPlan, run

        _no_cell(ns, cell)
        exe = sources.executable(ns.exe, scope)
        recorded, notes = None, []
        if ns.run is not None:
            recorded = sources.lookup(ns.run, scope)
            if getattr(recorded, "trace", None) is None:
                raise UsageError(f"--run {ns.run}: not a RunResult of `%ipu run ... --record`")
        elif not ns.no_timeline:
            bps = exe.program.batches_per_step
            plan = RunPlan(requests=max(ns.requests, 2 * bps), record=4096)
            recorded = run(ns.exe, exe, plan, None, None)
            notes.append(
                f"timeline: {recorded.completed} requests recorded by %ipu profile "
                "(pass --run RESULT to use your own `%ipu run --record`)"
            )
        return profile(ns.exe, exe, ns.ipu, ns.top, recorded, notes)

    def _graph(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .graph import graph

        _no_cell(ns, cell)
        return graph(ns.exe, sources.executable(ns.exe, scope))

    def _timeline(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .timeline import timeline

        _no_cell(ns, cell)
        view = timeline(ns.run, sources.lookup(ns.run, scope))
        if ns.window is not None:
            view.set_window(ns.window[0] * 1e6, ns.window[1] * 1e6)
        return view

    def _train(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .train import train

        _no_cell(ns, cell)
        session = sources.lookup(ns.session, scope)
        feeds = sources.lookup(ns.feeds, scope)
        result = train(ns.session, session, feeds, ns.runs, ns.anchor, display)
        self.shell.user_ns["_ipu_last_train"] = result
        self._keep(ns, result)
        if result.interrupted:
            print(
                f"%ipu train: interrupted after {result.runs} runs; the losses are in "
                "_ipu_last_train"
            )
            raise KeyboardInterrupt  # as %ipu run does, so Run All stops at this cell
        return None  # the live panel is the cell's output

    def _run(self, ns: argparse.Namespace, cell: str | None, scope: dict[str, Any]) -> Any:
        from .run import PreparedRun, RunPlan, check_feeds, run

        exe = sources.executable(ns.exe, scope)
        feeds = None
        if ns.inputs is not None:
            feeds = check_feeds(sources.lookup(ns.inputs, scope), f"--inputs {ns.inputs}")
        if cell is not None and cell.strip():
            if feeds is not None:
                raise UsageError("give the inputs either with --inputs or in the cell, not both")
            cell_ns = dict(scope)
            exec(compile(cell, "<%%ipu run>", "exec"), cell_ns)  # the user's own code
            if "inputs" not in cell_ns:
                raise UsageError("the %%ipu run cell must define `inputs` (a dict name -> array)")
            feeds = check_feeds(cell_ns["inputs"], "the cell's `inputs`")
        plan = RunPlan(
            **{f: getattr(ns, f) for f in RunPlan.__dataclass_fields__}  # same names
        )
        show = None if ns.no_widgets else display
        if ns.background:
            from .background import RunHandle

            prepared = PreparedRun(ns.exe, exe, plan, feeds, show, stop_button=True)
            handle = RunHandle(prepared, lambda r: self.shell.user_ns.update(_ipu_last_run=r))
            self._keep(ns, handle)
            return handle
        result = run(ns.exe, exe, plan, feeds, show)
        self.shell.user_ns["_ipu_last_run"] = result
        self._keep(ns, result)
        if result.interrupted:  # Ctrl-C or the notebook's stop button
            print(
                f"%ipu run: interrupted; {result.completed + result.failed} of "
                f"{result.submitted} submitted requests completed, none pending; the result "
                "is in _ipu_last_run"
            )
            raise KeyboardInterrupt  # as %timeit does, so Run All stops at this cell
        return result

    def _keep(self, ns: argparse.Namespace, value: Any) -> None:
        """`-o VAR`: the result also goes to the notebook's variable VAR."""
        if ns.output_var:
            self.shell.user_ns[ns.output_var] = value


def _no_cell(ns: argparse.Namespace, cell: str | None) -> None:
    if cell is not None and cell.strip():
        raise UsageError(f"%%ipu {ns.verb} takes no cell body; use %ipu {ns.verb}")
