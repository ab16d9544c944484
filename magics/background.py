"""`%ipu run --background`: the run goes on in a thread and the cell returns a RunHandle at once,
so the kernel stays free (other cells run, the dashboard's Stop button works)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from IPython.display import HTML

from . import html as H
from .run import PreparedRun, RunResult


class RunHandle:
    """A run in progress: `wait()` returns its RunResult, `stop()` ends it early (queued
    requests still complete), `done()` / `result` tell whether it has finished.

    Example (in a notebook):
        h = %ipu run exe --seconds 30 --background
        ...            # other cells run meanwhile; the dashboard keeps updating
        res = h.wait()
    """

    def __init__(self, prepared: PreparedRun, on_done: Callable[[RunResult], None]) -> None:
        self._prepared = prepared
        self._on_done = on_done
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._display: Any = None  # the DisplayHandle of the handle's output, once shown
        self._thread = threading.Thread(target=self._main, name="pyipu-magics-run", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.result = self._prepared.execute()
            self._on_done(self.result)
        except BaseException as e:  # re-raised by wait() on the caller's thread
            self.error = e
        with self._lock:  # the output shown while it ran now shows how it ended
            if self._display is not None:
                self._display.update(HTML(self._repr_html_()))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        with self._lock:
            self._display = display(HTML(self._repr_html_()), display_id=True)

    @property
    def name(self) -> str:
        return self._prepared.name

    def stop(self) -> None:
        self._prepared.stop.set()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> RunResult | None:
        """The result once the run has ended (None if `timeout` seconds passed first)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self.error is not None:
            raise self.error
        return self.result

    def _repr_html_(self) -> str:
        if self.result is not None:
            return self.result._repr_html_()
        if self.error is not None:
            return f"<div>Run of {H.esc(self.name)} failed: {H.esc(self.error)}</div>"
        samples = self._prepared.monitor.samples
        done = samples[-1].completed if samples else 0
        return (
            f'<div class="ipu-run-handle">Run of {H.esc(self.name)} in progress: {done} '
            "requests completed (<code>.wait()</code> for the result, <code>.stop()</code> "
            "to end it)</div>"
        )

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<RunHandle {self.name}: {state}>"
