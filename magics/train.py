"""`%ipu train SESSION FEEDS`: run a PopART TrainingSession (or a PopTorch trainingModel) step
after step with a live loss curve, the steps' speed and the time left; Ctrl-C (or the
notebook's stop button) stops after the step in flight, and the losses so far are the
result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
from IPython.core.error import UsageError
from IPython.display import HTML

from . import html as H
from .widgets import sparkline


@dataclass
class TrainResult:
    """The loss of every micro-batch the runs returned (in order), and how long they took."""

    name: str
    losses: np.ndarray = field(repr=False)
    runs: int
    samples: int
    seconds: float
    interrupted: bool = False

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def _repr_html_(self) -> str:
        return _panel(self, None)

    def __repr__(self) -> str:
        last = f"{self.losses[-1]:.4g}" if len(self.losses) else "-"
        stopped = ", interrupted" if self.interrupted else ""
        return (
            f"TrainResult({self.name}: {self.runs} runs, {len(self.losses)} losses, last {last}, "
            f"{self.samples_per_second:,.0f} samples/s{stopped})"
        )


def _panel(r: TrainResult, total: int | None) -> str:
    runs = f"{r.runs}" + (f" of {total}" if total else "")
    left = ""
    if total and r.runs and r.runs < total:
        left = f", about {r.seconds / r.runs * (total - r.runs):.0f} s left"
    text = (
        f"run {runs}: loss {r.losses[-1]:.4g}, {r.samples_per_second:,.0f} samples/s, "
        f"{r.seconds:.1f} s{left}"
        if len(r.losses)
        else "starting"
    )
    chart = sparkline(r.losses.tolist(), width=480, height=120, title="loss", unit="", fmt=".4g")
    return f"<div><b>%ipu train {H.esc(r.name)}</b><br>{chart}<br>{H.esc(text)}</div>"


def feed_source(value: Any, runs: int | None) -> tuple[Iterator[Mapping[str, Any]], int | None]:
    """The feeds of successive runs: a dict (the same every run), a callable run -> feed, or an
    iterable of feeds (dicts; a PopTorch model's also argument tuples, as a DataLoader yields
    them); and how many runs there are, when that is known."""
    if isinstance(value, Mapping):
        if runs is None:
            raise UsageError("with one feed dict, say how many runs: --runs N")
        return iter([value] * runs), runs
    if callable(value):
        if runs is None:
            raise UsageError("with a feed function, say how many runs: --runs N")
        return (value(i) for i in range(runs)), runs
    if isinstance(value, Iterable):
        known = len(value) if hasattr(value, "__len__") else None
        total = min(known, runs) if known is not None and runs is not None else known or runs
        return islice(iter(value), runs), total
    raise UsageError(
        f"FEEDS must be a dict, a function of the run number or an iterable of dicts, "
        f"got {type(value).__name__}"
    )


Step = Callable[[Any], tuple[list[float], int]]  # one run's feed → its losses and samples


def _popart_step(session: Any, anchor: str | None) -> Step:
    from pyipu.popart import PyStepIO

    loss = anchor or session.loss
    if loss not in session.dataFlow.anchors:
        raise UsageError(
            f"{loss!r} is not an anchor of the session's DataFlow (anchors: "
            f"{', '.join(session.dataFlow.anchors)}): anchor the loss, or name one with --anchor"
        )
    if session._exe is None:
        session.prepareDevice()
    anchors = session.initAnchorArrays()
    # samples per run: micro-batches per run × the first input's batch dimension
    micro = next(iter(session._input_infos().values()), None)
    per_run = int(np.prod(session._lead)) * (micro.shape()[0] if micro and micro.shape() else 1)

    def step(feed: Any) -> tuple[list[float], int]:
        if not isinstance(feed, Mapping):
            raise UsageError(f"the feed is a {type(feed).__name__}, not a dict")
        session.run(PyStepIO(dict(feed), anchors))
        return np.asarray(anchors[loss], np.float64).reshape(-1).tolist(), per_run

    return step


def _poptorch_step(model: Any) -> Step:
    """A PopTorch trainingModel: each feed is the call's arguments (a tuple or list, as a
    DataLoader gives them, or a dict of keyword arguments)."""

    def step(feed: Any) -> tuple[list[float], int]:
        args, kwargs = ((), dict(feed)) if isinstance(feed, Mapping) else (tuple(feed), {})
        loss = model.lossOf(model(*args, **kwargs))
        first = next((a for a in [*args, *kwargs.values()] if hasattr(a, "shape")), None)
        samples = int(first.shape[0]) if first is not None and len(first.shape) else 1
        return loss.detach().double().reshape(-1).tolist(), samples

    return step


def train(
    name: str,
    session: Any,
    feeds: Any,
    runs: int | None,
    anchor: str | None,
    show: Callable[..., Any] | None,
) -> TrainResult:
    from pyipu.popart import TrainingSession

    if isinstance(session, TrainingSession):
        step = _popart_step(session, anchor)
    elif getattr(session, "training", False) and hasattr(session, "lossOf"):
        step = _poptorch_step(session)
        if isinstance(feeds, tuple) and all(hasattr(t, "shape") for t in feeds):
            feeds = lambda _run, args=feeds: args  # noqa: E731 (one call's arguments, every run)
    else:
        raise UsageError(
            f"{name!r} is not a pyipu.popart.TrainingSession or a pyipu.poptorch trainingModel"
        )
    source, total = feed_source(feeds, runs)
    result = TrainResult(name, np.zeros(0, np.float32), 0, 0, 0.0)
    handle = show(HTML(_panel(result, total)), display_id=True) if show else None
    losses: list[float] = []
    t0 = time.perf_counter()
    last_draw = 0.0
    try:
        for feed in source:
            try:
                run_losses, samples = step(feed)
            except UsageError as e:
                raise UsageError(f"run {result.runs}: {e}") from None
            losses.extend(run_losses)
            result.runs += 1
            result.samples += samples
            now = time.perf_counter()
            result.seconds = now - t0
            if handle is not None and now - last_draw > 0.2:
                result.losses = np.asarray(losses)
                handle.update(HTML(_panel(result, total)))
                last_draw = now
    except KeyboardInterrupt:
        result.interrupted = True
    result.losses = np.asarray(losses)
    result.seconds = time.perf_counter() - t0
    if handle is not None:
        handle.update(HTML(_panel(result, total)))
    return result
