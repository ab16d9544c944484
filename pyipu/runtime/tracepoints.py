"""Tracepoints of a Runner: timed load / compute / store stages of every iteration it ran.

`RuntimeConfig(record_tracepoints=True)` makes the Runner keep the most recent
`request_tracepoints_buffer_size` events per replica (a bounded C buffer, no allocation while
recording); `Runner.tracepoints()` returns them. Times are CLOCK_MONOTONIC nanoseconds, the
clock of `time.monotonic_ns()`.

Example:
    >>> runner = Runner(exe, RuntimeConfig(record_tracepoints=True))  # doctest: +SKIP
    >>> tp = runner.tracepoints()  # doctest: +SKIP
    >>> tp.kind_names()[:3], tp.dropped  # doctest: +SKIP
    (['load', 'compute', 'store'], 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyipu import _core

KINDS: dict[int, str] = dict(_core.TRACE_KINDS)  # value -> "load" | "compute" | "store"
EVENT_DTYPE = np.dtype(_core.TRACE_EVENT_DTYPE.descr + [("replica", np.uint32)])


@dataclass(frozen=True)
class Tracepoints:
    """`events`: a structured array (start_ns, end_ns, kind, subgraph, seq, replica) sorted by
    start time; `dropped`: events overwritten because the buffers were full."""

    events: np.ndarray
    dropped: int

    def __len__(self) -> int:
        return len(self.events)

    def kind_names(self) -> list[str]:
        return [KINDS[int(k)] for k in self.events["kind"]]

    def of_kind(self, name: str) -> np.ndarray:
        """The events of one stage ("load", "compute" or "store")."""
        value = next(k for k, v in KINDS.items() if v == name)
        return self.events[self.events["kind"] == value]


def merge(traces: list[tuple[np.ndarray, int]]) -> Tracepoints:
    """One Tracepoints from every replica's (events, dropped), ordered by start time."""
    parts = []
    for replica, (events, _dropped) in enumerate(traces):
        part = np.empty(len(events), EVENT_DTYPE)
        for name in events.dtype.names or ():
            part[name] = events[name]
        part["replica"] = replica
        parts.append(part)
    events = np.concatenate(parts) if parts else np.empty(0, EVENT_DTYPE)
    events = events[np.argsort(events["start_ns"], kind="stable")]
    return Tracepoints(events, sum(d for _, d in traces))
