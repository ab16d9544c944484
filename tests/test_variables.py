"""Variables (pyipu.compiler.variables): weights a model updates each step, kept on the device
between requests, read and written through the Runner and the low-level Session, restored by
Load, carried through PopEF files; the compiler's checks of the mapping."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import _core, errors
from pyipu.compiler import Compiler, CompilerOptions, Executable
from pyipu.compiler.errors import CompileError
from pyipu.compiler.ir import Location
from pyipu.compiler.variables import VARIABLES_KEY, read_variables, set_variables
from pyipu.runtime import Runner, RuntimeConfig

RNG = np.random.default_rng(3)
W0 = RNG.standard_normal((4, 4)).astype(np.float32)


def momentum_model(variables: dict[str, str] | None = None) -> onnx.ModelProto:
    """Y = X @ Wᵀ; V = 0.5 V + X; W = W - 0.1 V; C = C + 1 (a step counter)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"]),  # folded if W were a constant
        helper.make_node("MatMul", ["X", "Wt"], ["Y"]),
        helper.make_node("Mul", ["V", "half"], ["Vh"]),
        helper.make_node("Add", ["Vh", "X"], ["V_new"]),
        helper.make_node("Mul", ["V_new", "lr"], ["step"]),
        helper.make_node("Sub", ["W", "step"], ["W_new"]),
        helper.make_node("Add", ["C", "one"], ["C_new"]),
    ]
    inits = [
        numpy_helper.from_array(W0, "W"),
        numpy_helper.from_array(np.zeros((4, 4), np.float32), "V"),
        numpy_helper.from_array(np.zeros((), np.float32), "C"),
        numpy_helper.from_array(np.float32(0.5), "half"),
        numpy_helper.from_array(np.float32(0.1), "lr"),
        numpy_helper.from_array(np.float32(1.0), "one"),
    ]
    g = helper.make_graph(
        nodes,
        "momentum",
        [helper.make_tensor_value_info("X", f, [4, 4])],
        [helper.make_tensor_value_info("Y", f, [4, 4])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    set_variables(m, variables or {"W": "W_new", "V": "V_new", "C": "C_new"})
    return m


def numpy_steps(xs: list[np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    w, v, ys = W0.copy(), np.zeros((4, 4), np.float32), []
    for x in xs:
        ys.append(x @ w.T)
        v = np.float32(0.5) * v + x
        w = w - np.float32(0.1) * v
    return ys, {"W": w, "V": v, "C": np.float32(len(xs))}


def test_state_persists_between_requests_and_matches_numpy() -> None:
    xs = [RNG.standard_normal((4, 4)).astype(np.float32) for _ in range(5)]
    with Runner(Compiler.compile(momentum_model())) as r:
        assert [d.name for d in r.get_execute_inputs()] == ["X"]
        assert [d.name for d in r.get_execute_outputs()] == ["Y"]
        assert sorted(d.name for d in r.get_variables()) == ["C", "V", "W"]
        ys = [r.run(["Y"], {"X": x})[0] for x in xs]
        got = r.read_variables()
    want_ys, want = numpy_steps(xs)
    for a, b in zip(ys, want_ys, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


def test_queued_requests_update_in_order() -> None:
    """Many requests in flight on two workers: each reads the state the previous one left
    (concurrent iterations over a second arena would fork it)."""
    xs = [RNG.standard_normal((4, 4)).astype(np.float32) for _ in range(40)]
    with Runner(Compiler.compile(momentum_model()), RuntimeConfig(num_threads=2)) as r:
        outs = [{"Y": np.empty((4, 4), np.float32)} for _ in xs]
        futures = [r.execute_async({"X": x}, o) for x, o in zip(xs, outs, strict=True)]
        for fut in futures:
            fut.wait()
        assert float(r.read_variables(["C"])["C"]) == len(xs)
    want_ys, _ = numpy_steps(xs)
    for o, y in zip(outs, want_ys, strict=True):
        np.testing.assert_allclose(o["Y"], y, rtol=1e-4, atol=1e-5)


def test_write_then_reset_restores_the_weight() -> None:
    with Runner(Compiler.compile(momentum_model())) as r:
        r.write_variables({"W": np.eye(4, dtype=np.float32)})
        x = RNG.standard_normal((4, 4)).astype(np.float32)
        np.testing.assert_allclose(r.run(["Y"], {"X": x})[0], x, rtol=1e-6)
        r.reset()
        np.testing.assert_array_equal(r.read_variables(["W"])["W"], W0)
        assert float(r.read_variables(["C"])["C"]) == 0


def test_bad_variable_access_is_a_typed_error() -> None:
    with Runner(Compiler.compile(momentum_model())) as r:
        with pytest.raises(errors.NotFoundError, match="'Y' is not a variable"):
            r.read_variables(["Y"])
        with pytest.raises(errors.InvalidArgumentError, match="'W' is float32"):
            r.write_variables({"W": np.zeros((4, 3), np.float32)})
        with pytest.raises(errors.InvalidArgumentError):
            r.write_variables({"W": np.zeros((4, 4), np.float64)})
    with pytest.raises(errors.Error):
        r.read_variables()  # closed


def test_popef_round_trip_and_low_level_session(tmp_path) -> None:
    exe = Compiler.compile(momentum_model())
    exe.save(tmp_path / "m.popef")
    native = Executable.open(tmp_path / "m.popef").native()
    variables = native.variables()
    assert sorted(variables) == ["C", "V", "W"]
    s = _core.Session(native, {"num_threads": 1})
    anchor = variables["W"][0]
    out = np.empty((4, 4), np.float32)
    with pytest.raises(errors.InvalidStateError):
        s.read_variable(anchor, out)  # before Load
    s.run_load()
    s.read_variable(anchor, out)
    np.testing.assert_array_equal(out, W0)
    s.write_variable(anchor, np.ones((4, 4), np.float32))
    s.read_variable(anchor, out)
    assert out.sum() == 16
    with pytest.raises(errors.InvalidArgumentError):
        s.read_variable(anchor, np.empty((4, 4), np.float32)[:, ::2].copy())
    with pytest.raises(errors.InvalidArgumentError, match="C-contiguous"):
        s.read_variable(anchor, np.empty((4, 8), np.float32)[:, ::2])


def test_memory_plan_gives_variables_their_own_bytes() -> None:
    ir = Compiler.compile(momentum_model()).program
    load = next(p for p in ir.programs if p.id == ir.load_program)
    copies = [ins for ins in load.instrs if ins.op.name == "COPY"]
    assert len(copies) == 3
    arena = [
        (t.offset, t.offset + t.nbytes, i)
        for i, t in enumerate(ir.tensors)
        if t.location == Location.ARENA
    ]
    for ins in copies:
        v = ins.outputs[0]
        lo, hi = ir.tensors[v].offset, ir.tensors[v].offset + ir.tensors[v].nbytes
        others = [i for a, b, i in arena if i != v and a < hi and lo < b]
        # only the variable's own views may share its bytes
        assert all(ir.tensors[i].nbytes <= hi - lo for i in others), others
    np.testing.assert_allclose(
        Compiler.compile(momentum_model()).run_reference({"X": np.eye(4, dtype=np.float32)})["Y"],
        W0.T,
        rtol=1e-6,
    )


def test_report_and_updates_requested_as_outputs() -> None:
    m = momentum_model()
    exe = Compiler.compile(m, ["Y", "W_new"])
    with Runner(exe) as r:
        (w_new,) = r.run(["W_new"], {"X": np.ones((4, 4), np.float32)})
        np.testing.assert_allclose(w_new, r.read_variables(["W"])["W"])
    assert exe.report().summary()


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"nope": "W_new"}, "not initializers"),
        ({"W": "missing"}, "unused|missing|not"),
        ({"W": "C_new"}, "cannot take"),
    ],
)
def test_bad_mappings_fail_to_compile(mapping: dict[str, str], match: str) -> None:
    with pytest.raises(CompileError, match=match):
        Compiler.compile(momentum_model(mapping))


def test_metadata_is_checked() -> None:
    m = momentum_model()
    assert read_variables(m) == {"W": "W_new", "V": "V_new", "C": "C_new"}
    for bad in ("{", json.dumps(["W"]), json.dumps({"W": 3})):
        for p in m.metadata_props:
            if p.key == VARIABLES_KEY:
                p.value = bad
        with pytest.raises(CompileError, match=VARIABLES_KEY):
            Compiler.compile(m)


@pytest.mark.parametrize(
    "options",
    [CompilerOptions(num_io_tiles=1), CompilerOptions(batches_per_step=4)],
    ids=["overlap_io", "batches_per_step"],
)
def test_every_iteration_updates_the_state(options: CompilerOptions) -> None:
    """A request of N batches runs N iterations, each reading the state the previous left;
    overlap I/O (inputs of the next iteration loaded during this one) keeps the order."""
    xs = [RNG.standard_normal((4, 4)).astype(np.float32) for _ in range(8)]
    with Runner(Compiler.compile(momentum_model(), options=options)) as r:
        ys = r.run(["Y"], {"X": np.concatenate(xs)})[0]  # one request, eight batches
        assert float(r.read_variables(["C"])["C"]) == len(xs)
    want_ys, _ = numpy_steps(xs)
    np.testing.assert_allclose(ys, np.concatenate(want_ys), rtol=1e-4, atol=1e-5)


def test_model_runtime_session_reads_and_writes_variables() -> None:
    from pyipu.model_runtime import Session

    xs = [RNG.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
    with Session(Compiler.compile(momentum_model())) as session:
        assert sorted(d.name for d in session.get_variables()) == ["C", "V", "W"]
        with pytest.raises(errors.InvalidStateError, match="run_load_programs"):
            session.read_variables()
        qm = session.create_queue_manager(timeout_ns=0)
        session.run_load_programs()
        y = np.empty((4, 4), np.float32)
        for x in xs:
            qm.input_queue("X").enqueue(x)
            qm.output_queue("Y").enqueue(y)
            session.run_main_programs()
        _, want = numpy_steps(xs)
        np.testing.assert_allclose(session.read_variables(["W"])["W"], want["W"], rtol=1e-5)
        session.write_variables({"W": np.zeros((4, 4), np.float32)})
        qm.input_queue("X").enqueue(xs[0])
        qm.output_queue("Y").enqueue(y)
        session.run_main_programs()
        assert not y.any()
        with pytest.raises(errors.NotFoundError):
            session.write_variables({"Y": y})
