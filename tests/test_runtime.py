"""Runner, RuntimeConfig and DeviceManager: PopRT's runtime API on the C device loop."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyipu import errors, runtime
from pyipu.compiler import Compiler, CompilerOptions


def mlp_model(batch: int = 4) -> onnx.ModelProto:
    """Y = relu(X @ W + B) with weights stored in the PopEF."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["H"]),
            helper.make_node("Add", ["H", "B"], ["Z"]),
            helper.make_node("Relu", ["Z"], ["Y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (batch, 8))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (batch, 5))],
        [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "B")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w, b = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    return np.maximum(x @ w + b, 0)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return mlp_model()


@pytest.fixture(scope="module")
def executable(model):
    return Compiler.compile(model, None, CompilerOptions())


@pytest.fixture
def runner(executable):
    with runtime.Runner(executable, runtime.RuntimeConfig(num_threads=2)) as r:
        yield r


def test_descriptors(runner):
    (x,) = runner.get_execute_inputs()
    (y,) = runner.get_execute_outputs()
    assert (x.name, x.shape, x.numpy_data_type(), x.size_in_bytes) == ("X", [4, 8], np.float32, 128)
    assert (y.name, y.shape, y.size_in_bytes) == ("Y", [4, 5], 80)
    weights = {d.name for d in runner.get_model_inputs() if d.popef_contains_tensor_data}
    # W and B, plus constants the compiler made (named "<tensor>:<role>", e.g. the Add + Relu
    # fused into one SCALE_SHIFT)
    assert {"W", "B"} <= weights and all(":" in w for w in weights - {"W", "B"}), weights
    assert not x.popef_contains_tensor_data


def test_execute_matches_numpy(runner, model):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    y = np.zeros((4, 5), np.float32)
    runner.execute({"X": x}, {"Y": y})
    np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_n_batches_along_dim0(runner, model):
    x = np.random.default_rng(2).standard_normal((12, 8)).astype(np.float32)
    y = np.zeros((12, 5), np.float32)
    runner.execute({"X": x}, {"Y": y})
    np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_execute_async(runner, model):
    xs = [np.random.default_rng(i).standard_normal((4, 8)).astype(np.float32) for i in range(8)]
    ys = [np.zeros((4, 5), np.float32) for _ in xs]
    futures = [runner.execute_async({"X": x}, {"Y": y}) for x, y in zip(xs, ys, strict=True)]
    for f in futures:
        assert f.wait() is True
        assert f.done()
    for x, y in zip(xs, ys, strict=True):
        np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_three_threads_complete_every_request(executable, model):
    config = runtime.RuntimeConfig()
    config.timeout_ns = 0
    with runtime.Runner(executable, config) as runner:
        failures: list[str] = []

        def worker(seed: int) -> None:
            rng = np.random.default_rng(seed)
            for _ in range(200):
                n = int(rng.integers(1, 4))
                x = rng.standard_normal((4 * n, 8)).astype(np.float32)
                y = np.full((4 * n, 5), np.nan, np.float32)
                runner.execute({"X": x}, {"Y": y})
                if not np.allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6):
                    failures.append(f"thread {seed}: wrong result")

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a request never completed"
        assert failures == []
        stats = runner.stats()
        assert stats["requests_submitted"] == stats["requests_completed"] == 600
        assert stats["requests_failed"] == 0


@pytest.mark.parametrize(
    ("inputs", "outputs", "exc", "text"),
    [
        ({"Q": np.zeros((4, 8), np.float32)}, {}, errors.InvalidArgumentError, "unknown input"),
        ({"X": np.zeros((4, 8), np.float64)}, {}, errors.DTypeError, "expected dtype float32"),
        ({"X": np.zeros((4, 9), np.float32)}, {}, errors.ShapeError, "expected shape [4, 8]"),
        ({"X": np.zeros((6, 8), np.float32)}, {}, errors.ShapeError, "got [6, 8]"),
        ({"X": np.zeros((8, 4), np.float32).T}, {}, errors.InvalidArgumentError, "C-contiguous"),
        ({"X": [[0.0] * 8] * 4}, {}, errors.InvalidArgumentError, "numpy.ndarray"),
        ({"W": np.zeros((8, 5), np.float32)}, {}, errors.InvalidArgumentError, "weight"),
    ],
)
def test_bad_inputs_raise_typed_errors(runner, inputs, outputs, exc, text):
    outputs = outputs or {"Y": np.zeros((4, 5), np.float32)}
    with pytest.raises(exc, match=None) as info:
        runner.execute(inputs, outputs)
    assert text in str(info.value)
    assert isinstance(info.value, errors.Error)


def test_bad_outputs_and_missing_anchors(runner):
    x = np.zeros((4, 8), np.float32)
    y = np.zeros((4, 5), np.float32)
    y.flags.writeable = False
    with pytest.raises(errors.InvalidArgumentError, match="read-only"):
        runner.execute({"X": x}, {"Y": y})
    with pytest.raises(errors.InvalidArgumentError, match="Y"):
        runner.execute({"X": x}, {})
    with pytest.raises(errors.ShapeError, match="batches"):
        runner.execute({"X": np.zeros((8, 8), np.float32)}, {"Y": np.zeros((4, 5), np.float32)})


def test_closed_runner(executable):
    runner = runtime.Runner(executable)
    runner.close()
    runner.close()  # idempotent
    with pytest.raises(errors.ClosedError):
        runner.execute({"X": np.zeros((4, 8), np.float32)}, {"Y": np.zeros((4, 5), np.float32)})


def test_runner_from_file_and_hash_check(executable, tmp_path, model):
    path = tmp_path / "mlp.popef"
    executable.save(str(path))
    with runtime.Runner(str(path)) as runner:
        x = np.ones((4, 8), np.float32)
        y = np.zeros((4, 5), np.float32)
        runner.execute({"X": x}, {"Y": y})
        np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5)


def test_corrupt_file_raises(tmp_path, executable):
    data = bytearray(executable.to_bytes())
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "bad.popef"
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptFileError):
        runtime.Runner(str(path))
    (tmp_path / "empty.popef").write_bytes(b"")
    with pytest.raises(errors.CorruptFileError):
        runtime.Runner(str(tmp_path / "empty.popef"))
    with pytest.raises(errors.FileIOError):
        runtime.Runner(str(tmp_path / "missing.popef"))


def test_runtime_config_defaults_and_unsupported_fields():
    c = runtime.RuntimeConfig()
    assert c.timeout_ns == 10_000_000
    assert c.validate_io_params is True
    assert c.batching_dim == 0xFFFFFFFF
    assert c.ring_buffer_size_multiplier == 2
    assert c.check_package_hash is True and c.thread_safe is True and c.auto_reset is False
    with pytest.raises(errors.UnsupportedError, match="replica_id_to_device"):
        c.replica_id_to_device = {0: 1}
    c.request_tracepoints_buffer_size = 5  # implemented: used with record_tracepoints
    with pytest.raises(errors.InvalidArgumentError):
        c.request_tracepoints_buffer_size = -1
    with pytest.raises(errors.InvalidArgumentError):
        c.timeout_ns = -1
    with pytest.raises(AttributeError):
        c.no_such_field = 1
    c.request_tracepoints_buffer_size = 1000  # the default is always accepted


def test_ring_multiplier_and_timeout_config(executable, model):
    config = runtime.RuntimeConfig(ring_buffer_size_multiplier=1, timeout_ns=1000, num_threads=1)
    with runtime.Runner(executable, config) as runner:
        x = np.random.default_rng(5).standard_normal((40, 8)).astype(np.float32)
        y = np.zeros((40, 5), np.float32)
        runner.execute({"X": x}, {"Y": y})  # 10 slots through rings of 1-2 slots
        np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_device_manager(monkeypatch):
    dm = runtime.DeviceManager()
    assert dm.ipu_hardware_version() == "ipu2"
    assert dm.get_num_devices() == 4
    assert dm.get_device(2).num_ipus == 2
    with pytest.raises(errors.NotFoundError):
        dm.get_device(8)
    monkeypatch.setenv("PYIPU_IPU_VERSION", "ipu21")
    assert dm.ipu_hardware_version() == "ipu21"
    assert dm.get_device(1).ipuVersion() == "ipu21"


def test_package_hash_mismatch(executable, model):
    foreign = executable.to_bytes(compiler_hash=0x1234)
    with pytest.raises(errors.PackageHashError, match="hash"):
        runtime.Runner(foreign)
    config = runtime.RuntimeConfig(check_package_hash=False)
    with runtime.Runner(foreign, config) as runner:  # loads anyway, as in PopRT
        x = np.ones((4, 8), np.float32)
        y = np.zeros((4, 5), np.float32)
        runner.execute({"X": x}, {"Y": y})
        np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5)


@pytest.fixture(scope="module")
def fused():
    from models import fusion_model0, fusion_model1

    from pyipu.compiler import fuse_models

    return Compiler.compile(fuse_models([fusion_model0(), fusion_model1()]), None)


def test_fused_model_selects_subgraph_and_rejects_mixed_requests(fused):
    config = runtime.RuntimeConfig(validate_io_params=False, timeout_ns=0)
    with runtime.Runner(fused, config) as r:
        names = {d.name: d.subgraph for d in r.get_execute_inputs() + r.get_execute_outputs()}
        assert names == {"graph0/X": 0, "graph0/Y": 0, "graph1/X": 1, "graph0/O": 0, "graph1/O": 1}
        x = np.ones((1, 2), np.float32)
        o = np.zeros(2, np.float32)
        r.execute({"graph0/X": x, "graph0/Y": x}, {"graph0/O": o})
        np.testing.assert_array_equal(o, [2, 2])
        # an explicit index agrees with the anchors given
        idx = np.array([1], np.uint32)
        o1 = np.zeros((1, 3), np.float16)
        r.execute({"graph1/X": np.full((1, 1), 0.5, np.float16), "index": idx}, {"graph1/O": o1})
        np.testing.assert_array_equal(o1, [[0.5, 1.5, 2.0]])
        with pytest.raises(errors.InvalidArgumentError, match="graph"):
            r.execute({"graph0/X": x, "graph0/Y": x}, {"graph1/O": o1})
        with pytest.raises(errors.InvalidArgumentError):
            r.execute({"graph0/X": x, "graph0/Y": x, "index": idx}, {"graph0/O": o})
        assert r.stats()["requests_failed"] == 0  # rejected at submit, never queued


def test_fused_model_with_validate_io_params_needs_every_anchor(fused):
    with runtime.Runner(fused, runtime.RuntimeConfig(timeout_ns=0)) as r:
        x = np.ones((1, 2), np.float32)
        with pytest.raises(errors.InvalidArgumentError, match="validate_io_params"):
            r.execute({"graph0/X": x, "graph0/Y": x}, {"graph0/O": np.zeros(2, np.float32)})


def test_close_with_requests_in_flight_completes_each_exactly_once(executable):
    config = runtime.RuntimeConfig(timeout_ns=0, num_threads=1)
    runner = runtime.Runner(executable, config)
    xs = [np.ones((40, 8), np.float32) for _ in range(50)]
    ys = [np.zeros((40, 5), np.float32) for _ in range(50)]
    futures = []
    submitter_errors: list[BaseException] = []

    def submit() -> None:
        for x, y in zip(xs, ys, strict=True):
            try:
                futures.append(runner.execute_async({"X": x}, {"Y": y}))
            except errors.ClosedError as e:  # submitted after close: rejected, never queued
                submitter_errors.append(e)

    t = threading.Thread(target=submit)
    t.start()
    runner.close()
    t.join(timeout=60)
    assert not t.is_alive()
    outcomes = {"ok": 0, "closed": 0}
    for f in futures:
        try:
            f.wait(timeout=60)
            outcomes["ok"] += 1
        except errors.ClosedError:
            outcomes["closed"] += 1
        assert f.done()
    assert outcomes["ok"] + outcomes["closed"] + len(submitter_errors) == 50


def test_garbage_collected_runner_completes_its_requests(executable):
    import gc

    runner = runtime.Runner(executable, runtime.RuntimeConfig(timeout_ns=0, num_threads=1))
    x = np.ones((400, 8), np.float32)  # 100 batches each: some are still queued when it goes
    ys = [np.zeros((400, 5), np.float32) for _ in range(3)]
    futures = [runner.execute_async({"X": x}, {"Y": y}) for y in ys]
    del runner
    gc.collect()
    for f in futures:
        try:
            f.wait(timeout=30)
        except errors.ClosedError:
            pass
        assert f.done()
