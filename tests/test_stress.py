"""Stress: 8 caller threads × mixed execute / execute_async × random request sizes under
dynamic batching × random timeouts × close at a random moment. Every accepted request completes
exactly once, with its own correct rows or a ClosedError; nothing hangs."""

from __future__ import annotations

import faulthandler
import random
import threading
import time

import numpy as np
import pytest
from test_runtime_semantics import compile_scale

from pyipu import errors, runtime


@pytest.fixture(scope="module")
def exe():
    return compile_scale(shape=(4, 3), bps=2)


@pytest.mark.parametrize("seed", range(6))
def test_exactly_once_under_close(exe, seed):
    faulthandler.dump_traceback_later(120, exit=True)  # a hang becomes a failure with stacks
    try:
        _trial(exe, seed)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _trial(exe, seed: int) -> None:
    rng = random.Random(seed)
    config = runtime.RuntimeConfig(
        batching_dim=0, timeout_ns=rng.choice([0, 100_000, 2_000_000]), num_threads=2
    )
    if config.timeout_ns == 0:  # partial batches must still finish: bound the batch wait
        config.is_batch_size_timeout_enabled = True
        config.batch_size_timeout_ns = 1_000_000
    runner = runtime.Runner(exe, config)
    lock = threading.Lock()
    outcomes = {"ok": 0, "closed": 0, "rejected": 0}
    wrong: list[str] = []

    def record(kind: str) -> None:
        with lock:
            outcomes[kind] += 1

    def check(x: np.ndarray, y: np.ndarray) -> None:
        if not np.array_equal(y, 2 * x + 1):
            with lock:
                wrong.append(f"rows {len(x)}")

    def client(cid: int) -> None:
        crng = random.Random(seed * 100 + cid)
        pending = []
        for i in range(150):
            rows = crng.randint(1, 9)
            x = np.full((rows, 3), cid * 1000 + i, np.float32)
            y = np.zeros_like(x)
            try:
                if crng.random() < 0.5:
                    runner.execute({"X": x}, {"Y": y})
                    check(x, y)
                    record("ok")
                else:
                    pending.append((runner.execute_async({"X": x}, {"Y": y}), x, y))
            except errors.ClosedError as e:
                # either rejected at submit (runner closed) or accepted and failed by close
                accepted = "before this request completed" in str(e)
                record("closed" if accepted else "rejected")
        for future, x, y in pending:
            try:
                future.wait(timeout=60)
                check(x, y)
                record("ok")
            except errors.ClosedError:
                record("closed")
            assert future.done()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    # close mid-stream: after a random number of completions
    target = rng.randint(50, 8 * 150 - 200)
    deadline = time.monotonic() + 30
    while runner.stats()["requests_completed"] < target and time.monotonic() < deadline:
        time.sleep(0.0005)
    runner.close()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller thread hung"
    assert wrong == []
    assert sum(outcomes.values()) == 8 * 150
    assert outcomes["ok"] >= target and outcomes["closed"] + outcomes["rejected"] > 0
    stats = runner.stats()
    accepted = outcomes["ok"] + outcomes["closed"]
    assert stats["requests_submitted"] == accepted
    assert stats["requests_completed"] == outcomes["ok"]
    assert stats["requests_failed"] == outcomes["closed"]
