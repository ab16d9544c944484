"""The small-request fast path of Runner.execute (docs/runtime.md, "Small requests"): same
results, errors and statistics as the queued path; inline execution on the caller's thread."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest
from models import fusion_model0
from onnx import TensorProto, helper, numpy_helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler, CompilerOptions


@pytest.fixture(scope="module")
def exe():
    return Compiler.compile(fusion_model0(), None)


@pytest.fixture(scope="module")
def gather_exe():
    """O = D[I] with D = [0, 1, 2, 3]: an index outside [-4, 4) fails the iteration."""
    g = helper.make_graph(
        [helper.make_node("Gather", ["D", "I"], ["O"])],
        "g",
        [helper.make_tensor_value_info("I", TensorProto.INT64, (1,))],
        [helper.make_tensor_value_info("O", TensorProto.FLOAT, (1,))],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "D")],
    )
    return Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), None)


def feeds(x: np.ndarray, y: np.ndarray) -> tuple[dict, dict]:
    return {"X": x, "Y": y}, {"O": np.zeros(x.size, np.float32)}


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_small_requests_run_on_the_calling_thread(exe):
    gc.collect()  # runners of earlier tests close (and join their threads) now, not meanwhile
    gc.disable()
    try:
        _check_inline_thread_use(exe)
    finally:
        gc.enable()


def _check_inline_thread_use(exe) -> None:
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=1)) as r:
        before = native_threads()
        x, y = np.array([[1, 2]], np.float32), np.array([[3, 4]], np.float32)
        for _ in range(5):
            inputs, outputs = feeds(x, y)
            r.execute(inputs, outputs)
            np.testing.assert_array_equal(outputs["O"], [4, 6])
        assert native_threads() == before  # no device thread was needed
        inputs, outputs = feeds(x, y)
        r.execute_async(inputs, outputs).wait()  # starts the device thread
        assert native_threads() == before + 1
        r.execute(inputs, outputs)  # inline again while the device thread is parked
        np.testing.assert_array_equal(outputs["O"], [4, 6])
        stats = r.stats()
        assert stats["requests_submitted"] == stats["requests_completed"] == 7
        assert stats["iterations"] == 7
        # The queued request completes before its step is counted: give the device a moment.
        deadline = time.monotonic() + 5
        while r.stats()["steps"] < 7 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert r.stats()["steps"] == 7
        assert stats["latency_p50_ns"] > 0


def test_mixed_sync_and_async_callers_keep_every_result(exe):
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2)) as r:
        wrong: list[int] = []

        def caller(seed: int) -> None:
            rng = np.random.default_rng(seed)
            for i in range(300):
                x, y = rng.random((1, 2), np.float32), rng.random((1, 2), np.float32)
                inputs, outputs = feeds(x, y)
                if i % 3 == 0:
                    r.execute_async(inputs, outputs).wait()
                else:
                    r.execute(inputs, outputs)
                if not np.array_equal(outputs["O"], (x + y).reshape(2)):
                    wrong.append(i)

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []
        stats = r.stats()
        assert stats["requests_completed"] == 900 and stats["requests_failed"] == 0


def test_requests_the_fast_path_leaves_alone_still_work(exe):
    with runtime.Runner(exe) as r:
        x = np.arange(6, dtype=np.float32).reshape(3, 2)  # 3 batches
        out = np.zeros(6, np.float32)
        r.execute({"X": x, "Y": x}, {"O": out})
        np.testing.assert_array_equal(out, 2 * x.reshape(6))

        class Feeds(dict):
            pass

        r.execute(Feeds(X=x[:1], Y=x[:1]), {"O": out[:2]})  # a dict subclass
        np.testing.assert_array_equal(out[:2], [0, 2])


@pytest.mark.parametrize(
    ("inputs", "outputs", "error", "match"),
    [
        (
            {"X": np.ones((1, 2)), "Y": np.ones((1, 2), np.float32)},
            None,
            errors.DTypeError,
            "expected dtype float32",
        ),
        ({"X": np.ones((1, 2), np.float32)}, None, errors.InvalidArgumentError, "missing input"),
        ({"Z": np.ones((1, 2), np.float32)}, None, errors.InvalidArgumentError, "unknown input"),
        (
            {"X": np.ones((2, 4), np.float32)[:, ::2], "Y": np.ones((2, 2), np.float32)},
            None,
            errors.InvalidArgumentError,
            "not C-contiguous",
        ),
        (None, {"O": np.zeros(3, np.float32)}, errors.ShapeError, "expected shape"),
        (
            {"X": np.ones((1, 2), np.float32), "Y": [[1.0, 2.0]]},
            None,
            errors.InvalidArgumentError,
            "must be a numpy.ndarray",
        ),
    ],
)
def test_bad_requests_raise_the_usual_errors(exe, inputs, outputs, error, match):
    ones = np.ones((1, 2), np.float32)
    inputs = inputs if inputs is not None else {"X": ones, "Y": ones}
    outputs = outputs if outputs is not None else {"O": np.zeros(2, np.float32)}
    with runtime.Runner(exe) as r, pytest.raises(error, match=match):
        r.execute(inputs, outputs)


def test_read_only_output_is_refused(exe):
    out = np.zeros(2, np.float32)
    out.flags.writeable = False
    ones = np.ones((1, 2), np.float32)
    with runtime.Runner(exe) as r, pytest.raises(errors.InvalidArgumentError, match="read-only"):
        r.execute({"X": ones, "Y": ones}, {"O": out})


def _call(r: runtime.Runner, inline: bool, index: int) -> object:
    """Result or (error class, message) of one Gather request."""
    inputs, out = {"I": np.array([index])}, np.zeros(1, np.float32)
    try:
        if inline:
            r.execute(inputs, {"O": out})
        else:
            r.execute_async(inputs, {"O": out}).wait()
        return float(out[0])
    except errors.Error as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("auto_reset", [False, True])
def test_a_failure_inline_is_handled_like_on_the_device(gather_exe, auto_reset):
    """The same errors, recovery and statistics whether the request ran inline or queued."""
    seen = {}
    for inline in (True, False):
        with runtime.Runner(gather_exe, runtime.RuntimeConfig(auto_reset=auto_reset)) as r:
            results = [_call(r, inline, 7), _call(r, inline, 1)]
            stats = r.stats()
            counts = [stats[k] for k in ("requests_failed", "requests_completed", "iterations")]
            seen[inline] = results, counts
    assert seen[True] == seen[False]
    failure, after = seen[True][0]
    assert failure[0] == "InvalidArgumentError" and "index 7" in failure[1]
    if auto_reset:
        assert after == 1.0
    else:
        assert after[0] == "ResetRequiredError"


def test_models_that_are_not_small_run_queued(exe):
    options = CompilerOptions()
    options.batches_per_step = 2  # a step spans two requests: never inline
    exe2 = Compiler.compile(fusion_model0(), None, options)
    with runtime.Runner(exe2, runtime.RuntimeConfig(timeout_ns=1_000_000)) as r:
        inputs, outputs = feeds(np.ones((1, 2), np.float32), np.ones((1, 2), np.float32))
        r.execute(inputs, outputs)
        np.testing.assert_array_equal(outputs["O"], [2, 2])


def test_many_weight_anchors_take_the_fast_path():
    """Old ONNX files list every initializer as a graph input: each is an anchor (a weight
    stored in the PopEF). The fast path's table holds any number of them (more than its 64
    stack slots here) and the request runs inline on the caller's arrays."""
    n = 80
    ws = [numpy_helper.from_array(np.full((1, 4), i, np.float32), f"W{i}") for i in range(n)]
    nodes = [
        helper.make_node("Add", ["X" if i == 0 else f"S{i}", f"W{i}"], [f"S{i + 1}"])
        for i in range(n)
    ]
    spec = [helper.make_tensor_value_info(f"W{i}", TensorProto.FLOAT, (1, 4)) for i in range(n)]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (1, 4)), *spec],
        [helper.make_tensor_value_info(f"S{n}", TensorProto.FLOAT, (1, 4))],
        ws,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    exe = Compiler.compile(model, None)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=1)) as r:
        assert len(r.get_model_inputs()) > 64 and r._fast is not None
        out = np.zeros((1, 4), np.float32)
        for k in range(3):
            r.execute({"X": x}, {f"S{n}": out})
            np.testing.assert_array_equal(out, x + n * (n - 1) / 2)
            assert r.stats()["in_place_buffers"] == 2 * (k + 1)  # X and the output
        with pytest.raises(errors.InvalidArgumentError, match="weight stored in the PopEF"):
            r.execute({"X": x, "W3": np.zeros((1, 4), np.float32)}, {f"S{n}": out})
        with pytest.raises(errors.ShapeError, match="expected shape"):
            r.execute({"X": x}, {f"S{n}": np.zeros(3, np.float32)})
