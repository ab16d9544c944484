"""pyipu against ONNX Runtime, side by side in one process at the same thread count:
the seed overlap-I/O model, the nine light CNNs (random weights), an MLP, a BERT-base encoder
layer and the two fusion seed models, at 1 and 2 threads; plus the seed fed by 3 callers.

    pytest benchmarks/bench_vs_ort.py --benchmark-json=vs_ort.json
    python tools/perf_table.py vs_ort.json      # the tables of docs/performance.md

Each model compiles once (engine option debug.allowOutOfMemory, see side_by_side.py); each
test times one engine while the untimed setup of every round runs the other one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from side_by_side import (
    OrtEngine,
    OrtRunEngine,
    PyipuEngine,
    compile_model,
    looped,
    ort_session,
    plan_rounds,
    relative_error,
    seconds_per_call,
    settled,
)
from zoo import MODELS, TINY, seed_overlap_io_model

THREADS = (1, 2)
BUDGET_S = 1.5  # per engine and case
TOLERANCE = 1e-2  # max |pyipu - ORT| / max |ORT|: the benchmark must time a correct run


def _engines(model: str) -> tuple[str, ...]:
    return ("pyipu", "ort", "ort_run") if model in TINY else ("pyipu", "ort")


CASES = [(m, t, e) for m in MODELS for t in THREADS for e in _engines(m)]


class Pool:
    """The current model's engines at every thread count; the previous model's are freed
    (VGG19 holds 550 MB of weights per engine)."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.entries: dict[int, dict[str, Any]] = {}

    def get(self, model: str, threads: int, quick: bool) -> dict[str, Any]:
        if model != self.model:
            self.close()
            self.model = model
            build, feeds_of = MODELS[model]
            proto = build()
            self.proto, self.feeds, self.exe = proto, feeds_of(proto), compile_model(proto)
        if threads not in self.entries:
            self.entries[threads] = self._entry(threads, quick)
        return self.entries[threads]

    def _entry(self, threads: int, quick: bool) -> dict[str, Any]:
        session = ort_session(self.proto, threads)
        engines = {
            "pyipu": PyipuEngine(self.exe, self.feeds, threads),
            "ort": OrtEngine(session, self.feeds),
        }
        if self.model in TINY:
            engines["ort_run"] = OrtRunEngine(session, self.feeds)
        slowest = max(seconds_per_call(e) for e in engines.values())
        rounds, calls = plan_rounds(slowest, BUDGET_S, quick)
        err = relative_error(engines["pyipu"].result(), engines["ort"].result())
        return {"engines": engines, "rounds": rounds, "calls": calls, "rel_error": err}

    def close(self) -> None:
        for entry in self.entries.values():
            for engine in entry["engines"].values():
                engine.close()
        self.entries = {}


@pytest.fixture(scope="module")
def pool():
    p = Pool()
    yield p
    p.close()


@pytest.mark.parametrize(
    ("model", "threads", "engine"), CASES, ids=[f"{m}-{t}T-{e}" for m, t, e in CASES]
)
def test_side_by_side(benchmark, pool, quick, model, threads, engine):
    entry = pool.get(model, threads, quick)
    engines, calls = entry["engines"], entry["calls"]
    other = engines["ort" if engine == "pyipu" else "pyipu"]
    benchmark.group = f"{model}-{threads}T"
    benchmark.extra_info.update(
        model=model,
        threads=threads,
        engine=engine,
        calls_per_round=calls,
        rel_error_vs_ort=entry["rel_error"],
    )
    # Tiny models run on the caller's thread (pyipu) or on one node (ORT): no pool to settle,
    # and a pause would time their first calls cold instead of the steady call cost.
    setup = looped(other, calls) if model in TINY else settled(looped(other, calls))
    benchmark.pedantic(looped(engines[engine], calls), setup=setup, rounds=entry["rounds"])
    assert entry["rel_error"] < TOLERANCE, entry["rel_error"]


CALLERS, REQUESTS_PER_CALLER = 3, 8


def _feed(call: Any) -> None:
    def caller() -> None:
        for _ in range(REQUESTS_PER_CALLER):
            call()

    workers = [threading.Thread(target=caller) for _ in range(CALLERS)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()


@pytest.fixture(scope="module")
def seed_callers():
    """The seed example's serving set-up on 2 cores: pyipu with one runner of 2 compute
    threads, ORT with one session of intra_op 1 (its fastest 3-caller set-up on 2 cores);
    each caller owns its buffers."""
    proto = seed_overlap_io_model()
    x = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    exe = compile_model(proto)
    from pyipu import runtime

    runner = runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0, num_threads=2))
    session = ort_session(proto, 1)
    out_name = runner.get_execute_outputs()[0].name
    local = threading.local()

    def pyipu_call() -> None:
        if not hasattr(local, "y"):
            local.y = np.empty((256, 256), np.float32)
        runner.execute({"input": x}, {out_name: local.y})

    def ort_call() -> None:
        session.run(None, {"input": x})

    yield {"pyipu": pyipu_call, "ort": ort_call}
    runner.close()


@pytest.mark.parametrize("engine", ["pyipu", "ort"])
def test_seed_three_callers(benchmark, seed_callers, quick, engine):
    """Throughput of the seed model fed by 3 Python threads (8 requests each per round)."""
    other = seed_callers["ort" if engine == "pyipu" else "pyipu"]
    benchmark.group = "seed_3callers"
    benchmark.extra_info.update(
        model="seed_overlap_io", engine=engine, requests_per_round=CALLERS * REQUESTS_PER_CALLER
    )
    _feed(seed_callers[engine])  # warm-up
    benchmark.pedantic(
        _feed,
        args=(seed_callers[engine],),
        setup=settled(lambda: _feed(other)),
        rounds=2 if quick else 7,
    )
