"""Manual sharding and pipelining: Sharder, shard.yaml, compiler validation, stage programs,
container round trip, the NumPy reference and the C runtime (sequential and pipelined)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import subprocess_env, tool
from models import fusion_model0
from onnx import TensorProto, helper, numpy_helper

import pyipu
from pyipu import runtime
from pyipu.compiler import CompileError, Compiler, CompilerOptions, UnsupportedError
from pyipu.compiler.cache import entry_path
from pyipu.compiler.executable import Executable
from pyipu.compiler.ir import NO_INDEX, Direction, Location
from pyipu.compiler.serialize import decode
from pyipu.compiler.sharding import (
    Sharder,
    load_sharding_config,
    manual_sharding,
    parse_sharding_config,
)
from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR
from pyipu.enums import Op
from pyipu.reference import numpy_interp

ROOT = Path(__file__).resolve().parent.parent
N = 64  # features: large enough that instructions are split over a group's workers


def mlp(width: int = N) -> onnx.ModelProto:
    """x → mm1 → relu1 → mm2 (+x) → relu2 → mm3 (+r1) → z; outputs z and r1 (an early value)."""
    rng = np.random.default_rng(0)
    ws = [
        numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), f"w{i}")
        for i in (1, 2, 3)
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "x"], ["h3"], name="add1"),
        helper.make_node("Relu", ["h3"], ["r3"], name="relu2"),
        helper.make_node("MatMul", ["r3", "w3"], ["y"], name="mm3"),
        helper.make_node("Add", ["y", "r1"], ["z"], name="add2"),
    ]
    f = TensorProto.FLOAT
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", f, [4, width])],
        [
            helper.make_tensor_value_info("z", f, [4, width]),
            helper.make_tensor_value_info("r1", f, [4, width]),
        ],
        ws,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


THREE = ({"relu1": 0, "relu2": 1}, {"relu1": 0, "relu2": 1})  # 3 stages on IPUs 0, 1, 2


def options(pipelined: bool, bps: int, num_ipus: int = 3) -> CompilerOptions:
    o = CompilerOptions()
    o.virtual_graph_mode = "manual"
    o.num_ipus = num_ipus
    o.enable_pipelining = pipelined
    o.batches_per_step = bps
    return o


def compile_sharded(pipelined: bool, bps: int, model: onnx.ModelProto | None = None):
    sharded = Sharder(*THREE).run(model or mlp())
    return Compiler.compile(sharded, None, options(pipelined, bps))


def compile_plain(bps: int, model: onnx.ModelProto | None = None) -> Executable:
    o = CompilerOptions()
    o.batches_per_step = bps
    return Compiler.compile(model or mlp(), None, o)


def run_runner(exe: Executable, x: np.ndarray, threads: int = 2, **cfg) -> tuple[dict, dict]:
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=threads, **cfg)) as r:
        outs = {
            d.name: np.zeros((x.shape[0], *d.shape[1:]), d.numpy_data_type())
            for d in r.get_execute_outputs()
        }
        r.execute({"x": x}, outs)
        return outs, r.stats()


def batches(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4 * n, N)).astype(np.float32)


# ---------------------------------------------------------------- Sharder and shard.yaml


def placements(model: onnx.ModelProto) -> dict[str, tuple[int, int | None]]:
    out = {}
    for n in model.graph.node:
        attrs = {a.name: a.i for a in n.attribute}
        out[n.name] = (attrs[IPU_ATTR], attrs.get(STAGE_ATTR))
    return out


def test_sharder_walks_back_from_sharding_points_and_puts_the_rest_on_max_plus_one() -> None:
    got = placements(Sharder({"relu1": 0, "relu2": 1}, {"relu1": 0, "relu2": 1}).run(mlp()))
    assert got == {
        "mm1": (0, 0),
        "relu1": (0, 0),
        "mm2": (1, 1),
        "add1": (1, 1),
        "relu2": (1, 1),
        "mm3": (2, 2),
        "add2": (2, 2),
    }
    # Without pipelining_info only __ipu_number is set; the input model is not modified.
    model = mlp()
    plain = placements(manual_sharding(model, {"add1": 0}))
    assert plain["relu1"] == (0, None) and plain["mm3"] == (1, None)
    assert all(len(n.attribute) == 0 for n in model.graph.node if n.op_type == "Add")


def test_sharder_is_poprts_converter_class_and_the_manual_sharding_pass() -> None:
    from pyipu.converter import Sharder as ConverterSharder

    assert ConverterSharder is Sharder
    points = ({"relu1": 0, "relu2": 1}, {"relu1": 0, "relu2": 1})
    by_pass = pyipu.PassManager([pyipu.Pass.get_pass("manual_sharding", *points)]).run(mlp())
    assert placements(by_pass) == placements(Sharder(*points).run(mlp()))
    assert "manual_sharding" in pyipu.get_registered_passes()


def test_sharder_rejects_unknown_nodes_and_mismatched_stages() -> None:
    with pytest.raises(CompileError, match="lacks"):
        Sharder({"nope": 0}).run(mlp())
    with pytest.raises(CompileError, match="same nodes"):
        Sharder({"relu1": 0, "relu2": 1}, {"relu1": 0}).run(mlp())
    with pytest.raises(CompileError, match="int >= 0"):
        Sharder({"relu1": -1}).run(mlp())


def test_shard_yaml(tmp_path: Path) -> None:
    path = tmp_path / "shard.yaml"
    path.write_text("- {node: relu1, device: 0, stage: 0}\n- {node: relu2, device: 1, stage: 1}\n")
    assert load_sharding_config(path) == THREE
    with pytest.raises(CompileError, match="every entry or on none"):
        parse_sharding_config([{"node": "a", "device": 0, "stage": 0}, {"node": "b", "device": 1}])
    with pytest.raises(CompileError, match="needs 'node' and 'device'"):
        parse_sharding_config([{"node": "a"}])
    with pytest.raises(CompileError, match="non-empty list"):
        parse_sharding_config({"node": "a"})
    with pytest.raises(CompileError, match="cannot read"):
        load_sharding_config(tmp_path / "missing.yaml")


# ---------------------------------------------------------------- validation


def with_attrs(model: onnx.ModelProto, where: dict[str, tuple[int, int]]) -> onnx.ModelProto:
    for n in model.graph.node:
        ipu, stage = where[n.name]
        n.attribute.extend(
            [helper.make_attribute(IPU_ATTR, ipu), helper.make_attribute(STAGE_ATTR, stage)]
        )
    return model


def test_validation_errors() -> None:
    sharded = Sharder(*THREE).run(mlp())
    o = CompilerOptions()
    o.enable_pipelining = True
    with pytest.raises(CompileError, match="needs virtual_graph_mode='manual'"):
        Compiler.compile(sharded, None, o)
    with pytest.raises(CompileError, match="multiple of the number of pipeline stages"):
        Compiler.compile(sharded, None, options(True, 4))
    with pytest.raises(CompileError, match="num_ipus is 2"):
        Compiler.compile(sharded, None, options(False, 1, num_ipus=2))
    with pytest.raises(CompileError, match=f"needs attribute {IPU_ATTR}"):
        Compiler.compile(mlp(), None, options(False, 1))
    # relu2 (stage 0) reads h3 from add1 in stage 1: named in the error.
    order = dict.fromkeys(["mm1", "relu1", "mm2", "add1", "mm3", "add2"], (1, 1))
    bad = with_attrs(mlp(), {**order, "mm1": (0, 0), "relu1": (0, 0), "relu2": (0, 0)})
    with pytest.raises(CompileError, match="'relu2'.*'add1'"):
        Compiler.compile(bad, None, options(True, 2))
    split = with_attrs(mlp(), {**order, "mm1": (0, 0), "relu1": (1, 0), "relu2": (1, 1)})
    with pytest.raises(CompileError, match="spans two IPUs"):
        Compiler.compile(split, None, options(True, 2))
    o = options(False, 1)
    o.num_io_tiles = 32
    with pytest.raises(CompileError, match="overlap I/O"):
        Compiler.compile(sharded, None, o)
    with pytest.raises(UnsupportedError, match="automatic sharding"):
        CompilerOptions().virtual_graph_mode = "auto"
    with pytest.raises(CompileError):
        CompilerOptions().virtual_graph_mode = "on"
    model = fusion_model0()
    assert entry_path(Path("c"), model, None, options(True, 3)) != entry_path(
        Path("c"), model, None, options(False, 3)
    )


# ---------------------------------------------------------------- compiled structure


@pytest.mark.parametrize("pipelined", [False, True])
def test_stage_programs_and_container_round_trip(pipelined: bool) -> None:
    exe = compile_sharded(pipelined, 3)
    ir = exe.program
    assert [s.ipu for s in ir.stages] == [0, 1, 2] and ir.pipelined == pipelined
    assert ir.main_programs == (ir.stages[0].program,) and ir.stages[-1].copy_program == NO_INDEX
    ranges: list[set[tuple[int, int]]] = []  # arena byte ranges each stage touches
    for st in ir.stages:
        copies = ir.program(st.copy_program).instrs if st.copy_program != NO_INDEX else ()
        assert all(ins.op == Op.COPY for ins in copies)
        touched = [t for ins in ir.program(st.program).instrs for t in (*ins.inputs, *ins.outputs)]
        touched += [ins.inputs[0] for ins in copies]  # copy outputs belong to the next stage
        specs = [ir.tensors[t] for t in touched]
        ranges.append(
            {(t.offset, t.offset + t.nbytes) for t in specs if t.location == Location.ARENA}
        )
    # Stages never share arena memory.
    for k, mine in enumerate(ranges):
        for other in ranges[k + 1 :]:
            assert all(hi <= lo2 or hi2 <= lo for lo, hi in mine for lo2, hi2 in other)
    # Inputs are read by stage 0 only, outputs written by the last stage (or its incoming copy).
    x = ir.anchor("x").tensor
    later = [ins for st in ir.stages[1:] for ins in ir.program(st.program).instrs]
    assert all(x not in ins.inputs for ins in later)
    for a in ir.anchors:
        if a.direction == Direction.OUTPUT:
            early = [ins for st in ir.stages[:-1] for ins in ir.program(st.program).instrs]
            assert all(a.tensor not in ins.outputs for ins in early)
    back = decode(exe.to_bytes())
    assert back.stages == ir.stages and back.pipelined == ir.pipelined
    assert "stages: 3" in ir.summary()
    c_exe = pyipu._core.Executable(pyipu._core.Container.from_bytes(exe.to_bytes()))
    assert c_exe.get_info()["num_stages"] == 3
    assert c_exe.get_info()["pipelined"] == pipelined


def test_old_containers_still_load() -> None:
    exe = Executable(ROOT / "examples" / "data" / "add.popef")
    assert exe.program.stages == () and not exe.program.pipelined
    plain = compile_plain(1)
    assert decode(plain.to_bytes()).stages == ()


def test_c_parser_rejects_bad_stage_tables() -> None:
    ir = compile_sharded(False, 1).program
    import dataclasses

    from pyipu.compiler.ir import Stage
    from pyipu.compiler.serialize import encode_container

    def load(bad) -> None:
        data = encode_container(bad)
        c = pyipu._core.Container.from_bytes(data)
        pyipu._core.Executable(c)

    load(ir)
    wrong_ipu = dataclasses.replace(ir, stages=(Stage(1, 0, 4), Stage(2, 1, 5), Stage(3, 7)))
    with pytest.raises(pyipu.Error, match="num_ipus"):
        load(wrong_ipu)
    compute_as_copy = dataclasses.replace(ir, stages=(Stage(1, 0, 2), Stage(2, 1, 5), Stage(3, 2)))
    with pytest.raises(pyipu.Error, match="not a COPY"):
        load(compute_as_copy)
    missing = dataclasses.replace(ir, stages=(Stage(1, 0, 4), Stage(2, 1, 99), Stage(3, 2)))
    with pytest.raises(pyipu.Error, match="does not exist"):
        load(missing)


def _with_operand(ir, stage: int, tensor: int, output: bool):
    """ir with the first operand of stage `stage`'s compute program that has `tensor`'s shape
    replaced by `tensor` (an output operand when `output`)."""
    import dataclasses

    want = ir.tensors[tensor]
    prog = ir.program(ir.stages[stage].program)
    instrs = list(prog.instrs)
    for i, ins in enumerate(instrs):
        ops = list(ins.outputs if output else ins.inputs)
        for q, t in enumerate(ops):
            spec = ir.tensors[t]
            if t != tensor and (spec.shape, spec.dtype) == (want.shape, want.dtype):
                ops[q] = tensor
                field = "outputs" if output else "inputs"
                instrs[i] = dataclasses.replace(ins, **{field: tuple(ops)})
                progs = tuple(
                    dataclasses.replace(p, instrs=tuple(instrs)) if p.id == prog.id else p
                    for p in ir.programs
                )
                return dataclasses.replace(ir, programs=progs)
    raise AssertionError("no operand of that shape")


def test_c_verifier_keeps_streamed_anchors_to_the_first_and_last_stage() -> None:
    """A tick loads the next batch into the inputs and stores the last stage's batch from the
    outputs: another stage using their bytes would see another batch's rows."""
    from pyipu.compiler.serialize import encode_container

    ir = compile_sharded(True, 3).program

    def load(bad) -> None:
        pyipu._core.Executable(pyipu._core.Container.from_bytes(encode_container(bad)))

    load(ir)
    x, z = ir.anchor("x").tensor, ir.anchor("z").tensor
    with pytest.raises(pyipu.Error, match="stage 1: .* reads bytes of input anchor 'x'"):
        load(_with_operand(ir, 1, x, output=False))
    with pytest.raises(pyipu.Error, match="stage 0: .* writes bytes of output anchor 'z'"):
        load(_with_operand(ir, 0, z, output=True))
    sequential = compile_sharded(False, 3).program  # stages run one after the other: allowed
    load(_with_operand(sequential, 1, sequential.anchor("x").tensor, output=False))


# ---------------------------------------------------------------- results


@pytest.mark.parametrize("pipelined", [False, True])
def test_reference_matches_unsharded(pipelined: bool) -> None:
    x = batches(6)
    want = numpy_interp.run(compile_plain(6).program, {"x": x})
    got = numpy_interp.run(compile_sharded(pipelined, 6).program, {"x": x})
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("bps", [3, 6])
def test_c_runtime_bit_identical(pipelined: bool, threads: int, bps: int) -> None:
    x = batches(2 * bps)  # two steps
    want, _ = run_runner(compile_plain(bps), x, threads)
    got, stats = run_runner(compile_sharded(pipelined, bps), x, threads)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert stats["iterations"] == 2 * bps
    if pipelined:
        assert stats["pipeline_ticks"] >= 2 * (bps + 2)  # fill and drain of each step
        assert (stats["concurrent_ticks"] > 0) == (threads > 1)
    else:
        assert stats["pipeline_ticks"] == 0


def test_pipelined_bps_one_stage_count_one() -> None:
    """A single stage pipelines trivially (batches_per_step 1 is a multiple of 1)."""
    sharded = manual_sharding(mlp(), {"add2": 0}, {"add2": 0})
    exe = Compiler.compile(sharded, None, options(True, 1, num_ipus=1))
    assert len(exe.program.stages) == 1
    x = batches(3)
    want, _ = run_runner(compile_plain(1), x)
    got, _ = run_runner(exe, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_padding_mid_step_and_dynamic_batching() -> None:
    exe = compile_sharded(True, 6)
    x = batches(4)
    want, _ = run_runner(compile_plain(1), x)
    # One request per batch: each step is padded after the timeout with batches in flight.
    cfg = runtime.RuntimeConfig(num_threads=2, timeout_ns=2_000_000)
    with runtime.Runner(exe, cfg) as r:
        for i in range(4):
            out = {"z": np.zeros((4, N), np.float32), "r1": np.zeros((4, N), np.float32)}
            r.execute({"x": x[4 * i : 4 * i + 4]}, out)
            np.testing.assert_array_equal(out["z"], want["z"][4 * i : 4 * i + 4])
        assert r.stats()["padded_iterations"] > 0
    # Dynamic batching: requests of 3 rows are packed into batches of 4 rows.
    cfg = runtime.RuntimeConfig(num_threads=2, batching_dim=0, timeout_ns=2_000_000)
    with runtime.Runner(exe, cfg) as r:
        futures, outs = [], []
        for i in range(5):
            out = {"z": np.zeros((3, N), np.float32), "r1": np.zeros((3, N), np.float32)}
            futures.append(r.execute_async({"x": x[3 * i : 3 * i + 3]}, out))
            outs.append(out)
        for i, (f, out) in enumerate(zip(futures, outs, strict=True)):
            f.wait()
            np.testing.assert_array_equal(out["z"], want["z"][3 * i : 3 * i + 3])


def gather_model() -> onnx.ModelProto:
    """x → relu (stage 0) → Gather by the input indices i (stage 1): bad indices fail stage 1."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Gather", ["h", "i"], ["y"], name="gather", axis=0),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", f, [4, N]),
            helper.make_tensor_value_info("i", TensorProto.INT32, [2]),
        ],
        [helper.make_tensor_value_info("y", f, [2, N])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return manual_sharding(model, {"relu": 0}, {"relu": 0})


def test_failing_stage_propagates_to_every_request() -> None:
    exe = Compiler.compile(gather_model(), None, options(True, 4, num_ipus=2))
    x = batches(1)
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2, timeout_ns=2_000_000)) as r:
        futures = []
        for k in range(8):
            idx = np.array([0, 9 if k % 3 == 1 else 3], np.int32)
            out = {"y": np.zeros((2, N), np.float32)}
            try:
                futures.append((k, out, r.execute_async({"x": x, "i": idx}, out)))
            except pyipu.errors.ResetRequiredError:
                break  # the device failed already: later submits are refused, never queued
        failed = 0
        for k, out, f in futures:
            if k % 3 == 1:
                with pytest.raises(pyipu.Error, match="out of range"):
                    f.wait()
                failed += 1
            else:
                try:
                    f.wait()
                except pyipu.Error as e:  # a batch in the failed step may be dropped, not hung
                    assert "stage" in str(e) or "out of range" in str(e)
                else:
                    np.testing.assert_array_equal(out["y"], np.maximum(x[[0, 3]], 0))
        assert failed == sum(k % 3 == 1 for k, _, _ in futures) >= 1
        assert r.stats()["requests_failed"] >= failed


def test_close_while_in_flight() -> None:
    exe = compile_sharded(True, 6)
    x = batches(1)
    r = runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2))
    futures = []
    for _ in range(20):
        out = {"z": np.zeros((4, N), np.float32), "r1": np.zeros((4, N), np.float32)}
        futures.append(r.execute_async({"x": x}, out))
    r.close()
    closed = 0
    for f in futures:
        try:
            assert f.wait(10.0)
        except pyipu.errors.ClosedError:
            closed += 1  # closed before it ran
        assert f.done()
    assert closed <= len(futures)  # the rest completed before the close


# ---------------------------------------------------------------- CLI


def test_cli_manual_sharding_config(tmp_path: Path) -> None:
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    (tmp_path / "shard.yaml").write_text(
        "- {node: relu1, device: 0, stage: 0}\n- {node: relu2, device: 1, stage: 1}\n"
    )
    args = [
        tool("pyipu"),
        "--input_model",
        str(tmp_path / "mlp.onnx"),
        "--output_dir",
        str(tmp_path),
        "--manual_sharding_config",
        str(tmp_path / "shard.yaml"),
        "--only_manual_sharding",
        "--batches_per_step",
        "3",
        "--export_popef",
    ]
    subprocess.run(args, check=True, env=subprocess_env(), capture_output=True)
    ir = Executable(tmp_path / "executable.popef").program
    assert [s.ipu for s in ir.stages] == [0, 1, 2] and ir.pipelined and ir.num_ipus == 3


def test_sharding_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sharding" / "sharding.py")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pipelined: 3 stages on IPUs [0, 1, 2], identical results" in result.stdout


def test_popef_dump_shows_stages(tmp_path: Path) -> None:
    import io

    from pyipu.cli.popef_dump import dump

    path = tmp_path / "sharded.popef"
    compile_sharded(True, 3).save(path)
    out = io.StringIO()
    dump(str(path), out)
    text = out.getvalue()
    assert "Stages (3, pipelined):" in text and "stage 1: IPU 1" in text
    assert "(copies of stage 0)" in text
