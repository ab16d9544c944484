"""Runner lifecycle and limits (docs/runtime.md): close() from several threads and from a
handler, handler views that outlive their call or their runner, and out-of-range timeouts,
counts and environment variables, each a typed pyipu error in bounded time."""

from __future__ import annotations

import gc
import math
import mmap
import threading
import time
import weakref

import numpy as np
import onnx
import pytest
from models import scale_model
from onnx import TensorProto, helper

from pyipu import _config, errors, model_runtime, runtime
from pyipu.compiler import Compiler, CompilerOptions


def _two_output_model() -> onnx.ModelProto:
    """Y = 2X + 1 and Z = 2X: Z can be served by a handler while Y goes to the request."""
    m = scale_model()
    m.graph.node.append(helper.make_node("Identity", ["T"], ["Z"]))
    m.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, (4, 3)))
    return m


@pytest.fixture(scope="module")
def exe():
    return Compiler.compile(scale_model(), None)


@pytest.fixture(scope="module")
def exe_bps4():
    options = CompilerOptions()
    options.batches_per_step = 4
    return Compiler.compile(scale_model(), None, options)


@pytest.fixture(scope="module")
def exe2():
    return Compiler.compile(_two_output_model(), None)


# --- close --------------------------------------------------------------------------------------
@pytest.mark.slow  # 20 s of close races
def test_every_concurrent_close_waits_for_every_accepted_request(exe2):
    release, entered = threading.Event(), threading.Event()

    def handler(_z: np.ndarray) -> None:
        entered.set()
        release.wait(10)

    r = runtime.Runner(exe2, runtime.RuntimeConfig(timeout_ns=0))
    r.set_user_output_handler("Z", handler)
    x = np.ones((4, 3), np.float32)
    futures = [r.execute_async({"X": x}, {"Y": np.zeros_like(x)}) for _ in range(4)]
    assert entered.wait(10)
    first = threading.Thread(target=r.close)
    first.start()
    time.sleep(0.1)  # the first close now waits for the device thread, held by the handler
    seen: list[list[bool]] = []
    closers = [
        threading.Thread(target=lambda: (r.close(), seen.append([f.done() for f in futures])))
        for _ in range(3)
    ]
    for t in closers:
        t.start()
    time.sleep(0.2)
    early = list(seen)
    release.set()
    for t in [first, *closers]:
        t.join(10)
        assert not t.is_alive()
    assert early == []  # none returned while the handler still held a request
    assert seen == [[True] * 4] * 3
    for f in futures:  # each completed exactly once: with its result or ClosedError
        try:
            f.wait(0)
        except errors.ClosedError:
            pass


def test_close_races_with_submitters_and_other_closers(exe):
    """4 threads submit N-batch requests while 2 close: each close returns only once every
    request accepted so far has completed, and every request completes exactly once."""
    for trial in range(12):
        _close_race(exe, 0.001 * (trial % 4))


def _close_race(exe, delay: float) -> None:
    r = runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0, num_threads=2))
    futures: list[runtime.runner.Future] = []
    not_done: list[int] = []
    start = threading.Barrier(6)

    def submit() -> None:
        start.wait()
        for i in range(40):
            x = np.full((4 * (1 + i % 3), 3), float(i), np.float32)
            try:
                futures.append(r.execute_async({"X": x}, {"Y": np.zeros_like(x)}))
            except errors.ClosedError:
                return

    def close(wait: float) -> None:
        start.wait()
        time.sleep(wait)
        r.close()
        not_done.extend(i for i, f in enumerate(list(futures)) if not f.done())

    threads = [threading.Thread(target=submit) for _ in range(4)]
    threads += [threading.Thread(target=close, args=(delay * k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert not_done == []
    for f in futures:
        try:
            assert f.wait(0) is True
        except errors.ClosedError:
            pass
    s = r.stats()
    assert s["requests_submitted"] == len(futures)
    assert s["requests_completed"] + s["requests_failed"] == len(futures)


def test_close_from_a_handler_is_refused_and_the_runner_stays_open(exe2):
    caught: list[BaseException] = []
    with runtime.Runner(exe2, runtime.RuntimeConfig(timeout_ns=0)) as r:

        def handler(_z: np.ndarray) -> None:
            try:
                r.close()
            except errors.Error as e:
                caught.append(e)

        r.set_user_output_handler("Z", handler)
        x = np.ones((4, 3), np.float32)
        y = np.zeros_like(x)
        r.execute({"X": x}, {"Y": y})
        assert len(caught) == 1 and isinstance(caught[0], errors.InvalidStateError)
        assert "callback" in str(caught[0])
        y[...] = 0
        r.execute({"X": x}, {"Y": y})  # still open, in Python as in C
        np.testing.assert_array_equal(y, 3 * x)
        r.stats()
    with pytest.raises(errors.ClosedError):
        r.execute({"X": x}, {"Y": y})


# --- handler views ------------------------------------------------------------------------------
def test_handler_views_keep_their_memory_alive(exe2):
    kept: list[np.ndarray] = []
    r = runtime.Runner(exe2, runtime.RuntimeConfig(timeout_ns=0, num_threads=1))
    r.set_user_output_handler("Z", kept.append)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    r.execute({"X": x}, {"Y": np.zeros_like(x)})
    memory = weakref.ref(r._runtimes[0])  # owns the device memory the view shows
    r.close()
    del r
    gc.collect()
    # The runner is gone; its device memory is not: the view still reads the last batch.
    assert memory() is not None
    churn = [np.full(4096, 7.0, np.float32) for _ in range(64)]  # would reuse freed blocks
    np.testing.assert_array_equal(kept[0], 2 * x)
    assert not kept[0].flags.writeable
    del churn
    kept.clear()  # the last view gone, the memory is freed
    gc.collect()
    assert memory() is None


def test_input_handler_view_stays_writable_memory_after_the_session(exe):
    kept: list[np.ndarray] = []

    def fill(a: np.ndarray) -> None:
        a[...] = 1.0
        kept.append(a)

    session = model_runtime.Session(exe, model_runtime.SessionConfig(num_threads=1))
    session.set_user_input_handler("X", fill)
    qm = session.create_queue_manager(timeout_ns=0)
    session.run_load_programs()
    y = np.zeros((4, 3), np.float32)
    qm.output_queue("Y").enqueue(y)
    session.run_main_programs()
    memory = weakref.ref(session._core)
    session.close()
    del session, qm
    gc.collect()
    np.testing.assert_array_equal(y, 3.0)
    assert memory() is not None
    kept[0][...] = 5.0  # memory of the closed session, still allocated for the view
    np.testing.assert_array_equal(kept[0], 5.0)
    kept.clear()
    gc.collect()
    assert memory() is None


# --- timeouts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("timeout", [math.inf, 2e10, 1e300, 2**70])
def test_wait_forever_for_infinite_and_huge_timeouts(exe, timeout):
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0)) as r:
        x = np.ones((4, 3), np.float32)
        future = r.execute_async({"X": x}, {"Y": np.zeros_like(x)})
        assert future.wait(timeout) is True


@pytest.mark.parametrize("timeout", [math.nan, "1", object()])
def test_nan_or_non_number_timeout_is_refused(exe, timeout):
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0)) as r:
        x = np.ones((4, 3), np.float32)
        future = r.execute_async({"X": x}, {"Y": np.zeros_like(x)})
        with pytest.raises(errors.InvalidArgumentError, match="timeout"):
            future.wait(timeout)
        assert future.wait(10)


def test_negative_and_zero_timeouts_do_not_wait(exe):
    config = runtime.RuntimeConfig(batching_dim=0, timeout_ns=0)
    with runtime.Runner(exe, config) as r:
        x = np.ones((1, 3), np.float32)
        future = r.execute_async({"X": x}, {"Y": np.zeros_like(x)})  # waits for 3 more rows
        for t in (0, -1, -math.inf):
            start = time.monotonic()
            assert future.wait(t) is False
            assert time.monotonic() - start < 1
        r.execute({"X": np.ones((3, 3), np.float32)}, {"Y": np.zeros((3, 3), np.float32)})
        assert future.wait(5)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout_ns", 2**64),
        ("timeout_ns", 2**70),
        ("batch_size_timeout_ns", 2**64),
        ("data_parallel_timeout_ns", 2**70),
        ("batching_dim", 2**32),
        ("ring_buffer_size_multiplier", 2**32),
        ("request_tracepoints_buffer_size", 2**64),
        ("num_threads", 2**32),
    ],
)
def test_config_values_beyond_their_c_field_are_refused(field, value):
    with pytest.raises(errors.InvalidArgumentError, match=field):
        runtime.RuntimeConfig(**{field: value})


@pytest.mark.parametrize("timeout_ns", [2**64 - 1, 2**63, 2**62])
def test_huge_step_timeouts_never_pad(exe_bps4, timeout_ns):
    """A deadline beyond the clock's range is never reached (a wrapped sum had already passed:
    every step was padded at once)."""
    with runtime.Runner(exe_bps4, runtime.RuntimeConfig(timeout_ns=timeout_ns)) as r:
        x = np.ones((4, 3), np.float32)
        for _ in range(3):  # iterations 1-3 of a 4-iteration step, each waiting for the next
            y = np.zeros_like(x)
            r.execute({"X": x}, {"Y": y})
            np.testing.assert_array_equal(y, 3 * x)
        time.sleep(0.2)
        assert r.stats()["padded_iterations"] == 0


def test_batch_size_timeout_never_waits_for_the_rest_of_the_batch(exe):
    """is_batch_size_timeout_enabled with the default batch_size_timeout_ns (max: never)."""
    config = runtime.RuntimeConfig(batching_dim=0, is_batch_size_timeout_enabled=True)
    with runtime.Runner(exe, config) as r:
        one = np.ones((1, 3), np.float32)
        future = r.execute_async({"X": one}, {"Y": np.zeros_like(one)})
        assert future.wait(0.3) is False  # 3 rows of its batch are missing
        assert r.stats()["padded_rows"] == 0
        three = np.ones((3, 3), np.float32)
        r.execute({"X": three}, {"Y": np.zeros_like(three)})
        assert future.wait(5)


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"timeout_ns": 2**70}, "timeout_ns"),
        ({"timeout_ns": -1}, "timeout_ns"),
        ({"capacity": 2**32}, "capacity"),
    ],
)
def test_queue_manager_settings_beyond_their_c_field_are_refused(exe, kwargs, what):
    session = model_runtime.Session(exe)
    with pytest.raises(errors.InvalidArgumentError, match=what):
        session.create_queue_manager(**kwargs)
    session.close()


def test_session_enqueue_timeouts(exe):
    with model_runtime.Session(exe, model_runtime.SessionConfig(num_threads=1)) as session:
        qm = session.create_queue_manager(timeout_ns=0)
        session.run_load_programs()
        y = np.zeros((4, 3), np.float32)
        qm.output_queue("Y").enqueue(y, timeout=math.inf)
        with pytest.raises(errors.InvalidArgumentError, match="NaN"):
            qm.input_queue("X").enqueue(np.ones((4, 3), np.float32), timeout=math.nan)
        with pytest.raises(errors.InvalidArgumentError, match="rows"):
            qm.input_queue("X").enqueue(np.ones((4, 3), np.float32), rows=2**32)
        qm.input_queue("X").enqueue(np.ones((4, 3), np.float32), timeout=2e10)
        session.run_main_programs()
        np.testing.assert_array_equal(y, 3.0)


# --- counts -------------------------------------------------------------------------------------
def test_request_of_more_batches_than_the_c_count_is_refused():
    """2^32 + 1 batches of a one-byte anchor: lazily mapped memory, never touched."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "id",
        [helper.make_tensor_value_info("X", TensorProto.UINT8, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.UINT8, [1])],
    )
    exe = Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    n = 2**32 + 1
    mx, my = mmap.mmap(-1, n), mmap.mmap(-1, n)
    x, y = np.frombuffer(mx, np.uint8), np.frombuffer(my, np.uint8)
    start = time.monotonic()
    with runtime.Runner(exe) as r:
        with pytest.raises(errors.ShapeError, match="4294967295 batches"):
            r.execute({"X": x}, {"Y": y})
        with pytest.raises(errors.ShapeError, match="4294967295 batches"):
            r.execute_async({"X": x}, {"Y": y})
    assert time.monotonic() - start < 30
    del x, y
    mx.close()
    my.close()


# --- environment variables ----------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["PYIPU_NUM_THREADS", "PYIPU_NUM_DEVICES"])
@pytest.mark.parametrize(
    "raw", ["two", "-1", "0", "1.5", "9" * 30, pytest.param("9" * 5000, id="5000-digits"), "2**70"]
)
def test_bad_environment_values_are_typed_errors_naming_the_variable(monkeypatch, variable, raw):
    monkeypatch.setenv(variable, raw)
    read = _config.num_threads if variable == "PYIPU_NUM_THREADS" else _config.num_devices
    with pytest.raises(errors.InvalidArgumentError, match=variable):
        read()


def test_too_many_threads_from_the_environment(monkeypatch, exe):
    from pyipu import _core

    monkeypatch.setenv("PYIPU_NUM_THREADS", str(_core.MAX_THREADS + 1))
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_NUM_THREADS"):
        runtime.Runner(exe)
    monkeypatch.setenv("PYIPU_NUM_THREADS", str(2**40))
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_NUM_THREADS"):
        model_runtime.Session(exe).create_queue_manager()


def test_bad_device_count_from_the_environment(monkeypatch, exe):
    monkeypatch.setenv("PYIPU_NUM_DEVICES", "99999999999999999999999")
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_NUM_DEVICES"):
        runtime.Runner(exe)
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_NUM_DEVICES"):
        runtime.DeviceManager().get_num_devices()
    monkeypatch.setenv("PYIPU_IPU_VERSION", "ipu3")
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_IPU_VERSION"):
        runtime.DeviceManager().ipu_hardware_version()
