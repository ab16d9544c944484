"""The low-level API (pyipu.model_runtime): Session, QueueManager, predicates, handlers."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyipu import errors
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.enums import Op
from pyipu.model_runtime import (
    AnchorCallbackPolicy,
    DeviceManager,
    Session,
    SessionConfig,
    pred_names,
)


def affine_model() -> onnx.ModelProto:
    """Y = X * S + B with weights S and B in the PopEF; X, Y float32 [2, 3]."""
    s = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([0.5, 0.5, 0.5], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "S"], ["T"]), helper.make_node("Add", ["T", "B"], ["Y"])],
        "affine",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (2, 3))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (2, 3))],
        [onnx.numpy_helper.from_array(s, "S"), onnx.numpy_helper.from_array(b, "B")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def expected(x: np.ndarray, s=(1.0, 2.0, 3.0), b=0.5) -> np.ndarray:
    return x * np.asarray(s, np.float32) + np.float32(b)


def updatable(batches_per_step: int = 1) -> CompilerOptions:
    """Options for executables whose weights sessions bind new values to: PopART's
    constantWeights = false, so that no compile-time fusion folds S and B."""
    options = CompilerOptions()
    options.batches_per_step = batches_per_step
    options.constant_weights = False
    return options


@pytest.fixture(scope="module")
def exe1():
    return Compiler.compile(affine_model(), None, updatable())


@pytest.fixture(scope="module")
def exe4():
    return Compiler.compile(affine_model(), None, updatable(4))


def test_constant_weights_decides_whether_the_weights_may_be_folded(exe1):
    folded = Compiler.compile(affine_model(), None, CompilerOptions())
    assert [Op(i.op) for i in folded.program.program(1).instrs] == [Op.SCALE_SHIFT]
    assert [Op(i.op) for i in exe1.program.program(1).instrs] == [Op.MUL, Op.ADD]


def test_queues_run_one_step(exe1):
    with Session(exe1, SessionConfig(num_threads=1)) as session:
        assert [d.name for d in session.get_user_input_anchors()] == ["X"]
        qm = session.create_queue_manager()
        session.run_load_programs()
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = np.zeros((2, 3), np.float32)
        seen: list[object] = []
        qm.input_queue("X").enqueue(x, seen.append)
        qm.output_queue("Y").enqueue(y, seen.append)
        assert len(qm.input_queue("X")) == 1
        step = session.run_main_programs()
        assert (step.iterations, step.padded_iterations) == (1, 0)
        np.testing.assert_allclose(y, expected(x))
        assert seen == [None, None]  # both slots completed without error
        assert len(qm.output_queue("Y")) == 0


def test_queue_validation(exe1):
    with Session(exe1) as session:
        qm = session.create_queue_manager()
        session.run_load_programs()
        with pytest.raises(errors.DTypeError):
            qm.input_queue("X").enqueue(np.zeros((2, 3), np.float64))
        with pytest.raises(errors.InvalidArgumentError, match="24 bytes"):
            qm.input_queue("X").enqueue(np.zeros((3, 3), np.float32))
        ro = np.zeros((2, 3), np.float32)
        ro.flags.writeable = False
        with pytest.raises(errors.InvalidArgumentError, match="read-only"):
            qm.output_queue("Y").enqueue(ro)
        with pytest.raises(errors.InvalidArgumentError, match="no input queue"):
            qm.input_queue("S")
        with pytest.raises(errors.InvalidStateError):
            session.create_queue_manager()


def test_handlers_and_callback_exceptions_reach_the_caller(exe1):
    with Session(exe1) as session:
        got: list[np.ndarray] = []
        session.set_user_input_handler("X", lambda a: a.fill(2.0))
        session.set_user_output_handler("Y", lambda a: got.append(a.copy()))
        session.run_load_programs()
        session.run_main_programs()
        np.testing.assert_allclose(got[0], expected(np.full((2, 3), 2.0, np.float32)))

    class Boom(Exception):
        pass

    def bad(_a: np.ndarray) -> None:
        raise Boom("handler failed")

    with Session(exe1) as session:
        session.set_user_input_handler("X", bad)
        session.set_user_output_handler("Y", lambda a: None)
        session.run_load_programs()
        with pytest.raises(Boom, match="handler failed"):
            session.run_main_programs()
        # the session stays usable: the next step fails the same way, no crash, no hang
        with pytest.raises(Boom):
            session.run_main_programs()


def test_exception_in_slot_callback_is_raised_by_run_main(exe1):
    with Session(exe1) as session:
        qm = session.create_queue_manager()
        session.run_load_programs()

        def callback(_err: object) -> None:
            raise KeyError("slot callback")

        qm.input_queue("X").enqueue(np.zeros((2, 3), np.float32), callback)
        qm.output_queue("Y").enqueue(np.zeros((2, 3), np.float32))
        with pytest.raises(KeyError, match="slot callback"):
            session.run_main_programs()


def test_predicates_bind_empty_callbacks(exe1):
    with Session(exe1) as session:
        qm = session.create_queue_manager(
            output_predicate=pred_names(["Y"]), input_predicate=pred_names([])
        )
        assert qm.inputs == {} and list(qm.outputs) == ["Y"]
        session.run_load_programs()
        y = np.full((2, 3), 7.0, np.float32)
        qm.output_queue("Y").enqueue(y)
        session.run_main_programs()
        np.testing.assert_allclose(y, expected(np.zeros((2, 3), np.float32)))  # X read zeros


def test_weight_bound_to_a_queue_overrides_the_popef_data(exe1):
    with Session(exe1) as session:

        def take_s(anchor):
            if anchor.name == "S" or not anchor.popef_contains_tensor_data:
                return AnchorCallbackPolicy.BIND_USER_CB
            return AnchorCallbackPolicy.BIND_TENSOR_DATA

        qm = session.create_queue_manager(input_predicate=take_s)
        qm.input_queue("S").enqueue(np.array([10.0, 20.0, 30.0], np.float32))
        session.run_load_programs()
        x = np.ones((2, 3), np.float32)
        y = np.zeros((2, 3), np.float32)
        qm.input_queue("X").enqueue(x)
        qm.output_queue("Y").enqueue(y)
        session.run_main_programs()
        np.testing.assert_allclose(y, expected(x, s=(10.0, 20.0, 30.0)))


def test_flush_stop_and_disconnect(exe4):
    session = Session(exe4, SessionConfig(num_threads=1))
    qm = session.create_queue_manager(timeout_ns=0)  # wait forever unless flushed
    session.run_load_programs()
    x = np.ones((2, 3), np.float32)
    y = np.zeros((2, 3), np.float32)
    qm.input_queue("X").enqueue(x)
    qm.output_queue("Y").enqueue(y)
    threading.Timer(0.2, qm.flush_all).start()
    step = session.run_main_programs()  # one iteration, then blocks until the flush
    assert (step.iterations, step.padded_iterations) == (1, 3)
    np.testing.assert_allclose(y, expected(x))

    results: list[object] = []
    qm.output_queue("Y").enqueue(np.zeros((2, 3), np.float32), results.append)
    threading.Timer(0.2, session.stop).start()
    start = time.monotonic()
    with pytest.raises(errors.ClosedError):
        session.run_main_programs()  # no input ever comes: stop() unblocks it
    assert time.monotonic() - start < 5
    session.close()
    assert len(results) == 1 and isinstance(results[0], errors.ClosedError)


def test_run_main_before_load_and_after_close(exe1):
    session = Session(exe1)
    with pytest.raises(errors.InvalidStateError):
        session.run_main_programs()
    session.close()
    with pytest.raises(errors.ClosedError):
        session.run_load_programs()


def test_ipu_model_device():
    dev = DeviceManager().create_ipu_model_device(num_ipus=1, ipu_version=21, tiles_per_ipu=100)
    assert (dev.ipu_version, dev.tiles_per_ipu) == ("ipu21", 100)
    with pytest.raises(errors.InvalidArgumentError):
        DeviceManager().create_ipu_model_device(1, "ipu3", 4)


@pytest.mark.parametrize("io_tiles", [0, "auto"])
def test_overlap_io_session_gives_the_same_results(io_tiles):
    options = CompilerOptions()
    options.batches_per_step = 3
    options.num_io_tiles = io_tiles
    exe = Compiler.compile(affine_model(), None, options)
    with Session(exe, SessionConfig(num_threads=1)) as session:
        qm = session.create_queue_manager(capacity=8)
        session.run_load_programs()
        xs = [np.full((2, 3), i, np.float32) for i in range(3)]
        ys = [np.zeros((2, 3), np.float32) for _ in xs]
        for x, y in zip(xs, ys, strict=True):
            qm.input_queue("X").enqueue(x)
            qm.output_queue("Y").enqueue(y)
        assert session.run_main_programs().iterations == 3
        for x, y in zip(xs, ys, strict=True):
            np.testing.assert_allclose(y, expected(x))
        assert session.stats()["overlap_io"] == (io_tiles == "auto")


def test_queued_batches_run_two_at_a_time_and_reload_refreshes_both(exe4):
    """With two workers and a step's four batches already queued, iterations run in pairs, each
    alone on one worker (the second over its own copy of the arena); running Load again with a
    new weight reaches both copies."""

    def take_s(anchor):
        if anchor.name == "S" or not anchor.popef_contains_tensor_data:
            return AnchorCallbackPolicy.BIND_USER_CB
        return AnchorCallbackPolicy.BIND_TENSOR_DATA

    for threads in (1, 2):
        with Session(exe4, SessionConfig(num_threads=threads)) as session:
            qm = session.create_queue_manager(input_predicate=take_s)
            for scale in ((10.0, 20.0, 30.0), (-1.0, 0.5, 2.0)):
                qm.input_queue("S").enqueue(np.array(scale, np.float32))
                session.run_load_programs()
                xs = [np.full((2, 3), i + 1, np.float32) for i in range(4)]
                ys = [np.zeros((2, 3), np.float32) for _ in range(4)]
                for x, y in zip(xs, ys, strict=True):
                    qm.input_queue("X").enqueue(x)
                    qm.output_queue("Y").enqueue(y)
                step = session.run_main_programs()
                assert (step.iterations, step.padded_iterations) == (4, 0)
                for x, y in zip(xs, ys, strict=True):
                    np.testing.assert_allclose(y, expected(x, s=scale))
            assert session.stats()["concurrent_iterations"] == (8 if threads == 2 else 0)
