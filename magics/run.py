"""`%ipu run`: drive a Runner with a window of queued requests while a Monitor updates widgets.

The cell's thread (a RunHandle's thread with --background) submits requests and waits on them
with short timeouts (the C engine runs with the GIL released), so the Monitor thread and the
kernel's I/O keep going. SIGINT (the notebook's interrupt), the Stop button and RunHandle.stop()
only set a flag: no new request is submitted, every queued one is waited for, and the partial
result is returned, so each submitted request completes exactly once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from IPython.core.error import UsageError

from pyipu.errors import DTypeError, Error, InvalidArgumentError, ShapeError

from . import html as H
from .widgets import Monitor, RunDashboard, Sample

DEFAULT_REQUESTS = 200
WAIT_SLICE_S = 0.05  # wait in slices so a pending SIGINT handler runs promptly


@dataclass
class RunPlan:
    """What `%ipu run` was asked to do (field names are the options')."""

    requests: int | None = None  # None and no seconds: DEFAULT_REQUESTS
    seconds: float | None = None
    batch: int = 1
    in_flight: int | None = None
    threads: int | None = None
    timeout_ns: int | None = None
    record: int | None = None  # tracepoints to keep per replica
    seed: int = 0


@dataclass
class RunResult:
    """What a `%ipu run` did: counts, wall time, the runtime's final statistics, the samples the
    widgets showed, and the recorded trace (`--record`)."""

    name: str
    submitted: int
    completed: int
    failed: int
    seconds: float
    batch: int
    threads: int
    interrupted: bool
    stats: dict[str, Any]
    samples: list[Sample] = field(repr=False)
    errors: list[str] = field(default_factory=list)
    outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    trace: Any = field(default=None, repr=False)

    @property
    def throughput_rps(self) -> float:
        """Completed requests per second of wall time."""
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_p50_ms(self) -> float:
        return self.stats.get("latency_p50_ns", 0) / 1e6

    @property
    def latency_p99_ms(self) -> float:
        return self.stats.get("latency_p99_ns", 0) / 1e6

    def _repr_html_(self) -> str:
        state = "interrupted" if self.interrupted else ("done" if not self.failed else "failed")
        rows = [
            ("state", state),
            (
                "requests completed / failed / submitted",
                f"{self.completed} / {self.failed} / {self.submitted}",
            ),
            ("batches per request", self.batch),
            ("wall time", H.duration(self.seconds)),
            (
                "throughput",
                f"{self.throughput_rps:,.1f} requests/s "
                f"({self.throughput_rps * self.batch:,.1f} batches/s)",
            ),
            ("latency p50 / p99", f"{self.latency_p50_ms:.3f} ms / {self.latency_p99_ms:.3f} ms"),
            ("compute threads", self.threads),
            (
                "steps / iterations",
                f"{self.stats.get('steps', 0)} / {self.stats.get('iterations', 0)}",
            ),
            ("trace events", len(self.trace.events) if self.trace is not None else "not recorded"),
        ]
        rows += [("error", e) for e in self.errors[:3]]
        return (
            f'<div class="ipu-run-result"><b>Run of {H.esc(self.name)}</b>'
            + H.pairs(rows)
            + "</div>"
        )

    def __repr__(self) -> str:
        return (
            f"<RunResult {self.name}: {self.completed}/{self.submitted} completed, "
            f"{self.failed} failed, {self.throughput_rps:.1f} req/s"
            f"{', interrupted' if self.interrupted else ''}>"
        )


def random_feeds(runner: Any, batch: int, seed: int) -> list[dict[str, np.ndarray]]:
    """One feed dict per subgraph (one for a plain model), `batch` batches stacked on dim 0."""
    from pyipu.cli.run_info import _random

    rng = np.random.default_rng(seed)
    ins = runner.get_execute_inputs()
    outs = runner.get_execute_outputs()
    groups = sorted({d.subgraph for d in ins + outs}, key=lambda s: -1 if s is None else s)
    feeds = []
    for sub in groups:
        feed = {}
        for d in ins:
            if d.subgraph == sub:
                shape = list(d.shape)
                if shape:
                    shape[0] *= batch
                feed[d.name] = _random(shape, d.numpy_data_type(), rng)
        feeds.append(feed)
    return feeds


def check_feeds(value: Any, source: str) -> list[dict[str, np.ndarray]]:
    """Given inputs: a dict name -> array, or a list of such dicts used in turn."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items or not all(isinstance(v, Mapping) for v in items):
        raise UsageError(f"{source} must be a dict of input name -> numpy array (or a list)")
    return [{str(k): np.asarray(v) for k, v in item.items()} for item in items]


def _outputs_for(runner: Any, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Output arrays matching a feed's subgraph and number of batches."""
    ins = {d.name: d for d in runner.get_execute_inputs()}
    given = [ins[n] for n in feed if n in ins]
    subgraph = given[0].subgraph if given else None
    first = next((feed[n] for n in feed if n in ins and ins[n].shape), None)
    batches = 1
    if first is not None and given[0].shape[0] > 0:
        batches = max(1, first.shape[0] // given[0].shape[0]) if first.ndim else 1
    outs = {}
    for d in runner.get_execute_outputs():
        if subgraph is None or d.subgraph in (None, subgraph):
            shape = list(d.shape)
            if shape:
                shape[0] *= batches
            outs[d.name] = np.zeros(shape, d.numpy_data_type())
    return outs


@contextmanager
def sigint_as_flag(flag: threading.Event) -> Iterator[None]:
    """While running, SIGINT sets `flag` instead of raising KeyboardInterrupt mid-bookkeeping."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: flag.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait(future: Any) -> str | None:
    """Wait for a request; its error message, or None when it succeeded."""
    try:
        while not future.wait(WAIT_SLICE_S):
            pass
    except Exception as e:  # the request's own failure (a pyipu.Error): count it, go on
        return f"{type(e).__name__}: {e}"
    return None


def _config(exe: Any, plan: RunPlan) -> Any:
    from pyipu.runtime import RuntimeConfig

    config = RuntimeConfig(num_threads=plan.threads)
    info = exe.native().get_info()
    if int(info["num_subgraphs"]) > 1:  # a fused model: a request runs one subgraph
        config.validate_io_params = False
    if plan.timeout_ns is not None:
        if plan.timeout_ns == 0 and int(info["batches_per_step"]) > 1:
            # the last, partial step would wait forever for batches nobody sends
            raise UsageError(
                "--timeout-ns 0 needs batches_per_step 1 (this executable has "
                f"{info['batches_per_step']})"
            )
        config.timeout_ns = plan.timeout_ns
    if plan.record:
        config.record_tracepoints = True
        config.request_tracepoints_buffer_size = plan.record
    return config


class PreparedRun:
    """A Runner with its feeds, output buffers and dashboard, made on the cell's thread (widgets
    must be created and displayed there); `execute` then runs the requests on any thread.
    `stop` ends the run early (SIGINT, the Stop button or RunHandle.stop())."""

    def __init__(
        self,
        name: str,
        exe: Any,
        plan: RunPlan,
        feeds: list[dict[str, np.ndarray]] | None,
        show: Callable[..., Any] | None,
        stop_button: bool = False,
    ) -> None:
        from pyipu.runtime import Runner

        self.name, self.plan = name, plan
        self.stop = threading.Event()
        self.runner = runner = Runner(exe, _config(exe, plan))
        try:
            self.feeds = feeds or random_feeds(runner, plan.batch, plan.seed)
            self.total = plan.requests if plan.seconds is None else None
            if self.total is None and plan.seconds is None:
                self.total = DEFAULT_REQUESTS
            bps = runner.batches_per_step
            self.window = plan.in_flight or max(4, 2 * bps * plan.batch)
            self.pool = [
                _outputs_for(runner, self.feeds[i % len(self.feeds)]) for i in range(self.window)
            ]
            for i in range(min(len(self.feeds), self.window)):  # before the dashboard shows
                try:
                    runner.check_request(self.feeds[i], self.pool[i])
                except Error as e:
                    raise UsageError(f"%ipu run {name}: the inputs do not fit: {e}") from None
            stats = runner.stats()
            self.threads = int(stats["num_threads"])
            self.dash = None
            if show is not None:
                amount = f"{self.total} requests" if self.total else f"{plan.seconds:g} s"
                title = (
                    f"%ipu run {name}: {amount} × {plan.batch} batch(es), "
                    f"{self.threads} compute thread(s)"
                )
                capacity = runner.config.ring_buffer_size_multiplier * bps * stats["replicas"]
                self.dash = RunDashboard(
                    title,
                    list(stats["queue_depth"]),
                    capacity,
                    self.total,
                    plan.seconds,
                    self.stop.set if stop_button else None,
                )
                self.dash.live.show(show)
        except BaseException:
            runner.close()
            raise
        self.start = time.perf_counter()
        self.monitor = Monitor(self._sample, self.dash.update if self.dash else lambda s: None)

    def _sample(self) -> Sample:
        st = self.runner.stats()
        return Sample(
            t=time.perf_counter() - self.start,
            submitted=st["requests_submitted"],
            completed=st["requests_completed"],
            failed=st["requests_failed"],
            throughput_rps=float(st["throughput_rps"]),
            latency_p50_ns=int(st["latency_p50_ns"]),
            latency_p99_ns=int(st["latency_p99_ns"]),
            queue_depth=dict(st["queue_depth"]),
        )

    def execute(self) -> RunResult:
        """Run every request (or until stopped), close the runner, return the result."""
        try:
            result = self._loop()
        finally:
            self.runner.close()
        if self.plan.record:  # after close: every stage has ended and recorded its event
            result.trace = self.runner.tracepoints()
        return result

    def _loop(self) -> RunResult:
        runner, plan, stop, window = self.runner, self.plan, self.stop, self.window
        inflight: deque[tuple[Any, int]] = deque()
        submitted = completed = failed = 0
        errors: list[str] = []
        last_ok = -1

        def more() -> bool:
            if stop.is_set():
                return False
            if self.total is not None:
                return submitted < self.total
            return time.perf_counter() - self.start < (plan.seconds or 0.0)

        def settle() -> None:
            nonlocal completed, failed, last_ok
            future, slot = inflight.popleft()
            err = _wait(future)
            if err is None:
                completed += 1
                last_ok = slot
            else:
                failed += 1
                if len(errors) < 10:
                    errors.append(err)

        self.start = time.perf_counter()
        self.monitor.start()
        try:
            while more():
                while len(inflight) < window and more():
                    slot = submitted % window
                    feed = self.feeds[submitted % len(self.feeds)]
                    try:
                        future = runner.execute_async(feed, self.pool[slot])
                    except (InvalidArgumentError, ShapeError, DTypeError) as e:
                        raise UsageError(f"the inputs were refused: {e}") from None  # none queued
                    inflight.append((future, slot))
                    submitted += 1
                settle()
            while inflight:
                settle()
        except BaseException as e:
            if self.dash is not None:
                self.dash.finish(f"stopped: {type(e).__name__}: {e}", ok=False)
            raise
        finally:
            while inflight:  # an exception above: still settle what was queued
                settle()
            self.monitor.stop()
        seconds = time.perf_counter() - self.start
        result = RunResult(
            name=self.name,
            submitted=submitted,
            completed=completed,
            failed=failed,
            seconds=seconds,
            batch=plan.batch,
            threads=self.threads,
            interrupted=stop.is_set(),
            stats=runner.stats(),
            samples=self.monitor.samples,
            errors=errors,
            outputs={k: v.copy() for k, v in self.pool[last_ok].items()} if last_ok >= 0 else {},
        )
        if self.dash is not None:
            state = "interrupted" if result.interrupted else ("done" if not failed else "failed")
            self.dash.finish(
                f"{state}: {completed} completed, {failed} failed in {seconds:.2f} s "
                f"({result.throughput_rps:,.1f} req/s)",
                ok=not failed and not result.interrupted,
            )
        if self.monitor.error is not None:
            errors.append(f"widget update failed: {self.monitor.error!r}")
        return result


def run(
    name: str,
    exe: Any,
    plan: RunPlan,
    feeds: list[dict[str, np.ndarray]] | None,
    show: Callable[..., Any] | None,
) -> RunResult:
    """Run `exe` on this thread; `show(widget)` displays the dashboard (None: no widgets)."""
    prepared = PreparedRun(name, exe, plan, feeds, show)
    with sigint_as_flag(prepared.stop):
        return prepared.execute()
