"""The IPU Model: tile mapping, per-tile memory, out-of-memory, cycle estimates, reports.

Expected numbers are worked out by hand from the rules and constants of docs/ipu-model.md.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import (
    CompileError,
    Compiler,
    CompilerOptions,
    Executable,
    IPUModelReport,
    IPUOutOfMemoryError,
)
from pyipu.compiler.ipu_model import NOT_FIT_LABEL, estimate
from pyipu.compiler.ipu_model.mapping import linear_map
from pyipu.compiler.ir import (
    Anchor,
    Direction,
    Instr,
    Location,
    ModelIR,
    Program,
    Stage,
    TensorSpec,
)
from pyipu.enums import DType, Op
from pyipu.ipu_targets import TARGETS, target

TILE = 624 * 1024


def matmul_model(m: int = 8, k: int = 256, n: int = 512) -> onnx.ModelProto:
    """y[m, n] = x[m, k] @ W[k, n] with W a weight."""
    w = numpy_helper.from_array(np.ones((k, n), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def expand_model(numel: int) -> onnx.ModelProto:
    """z = ReduceSum(Expand(x[1], [numel])): one huge activation, no weight bytes."""
    shape = numpy_helper.from_array(np.array([numel], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Expand", ["x", "shape"], ["big"], name="expand"),
            helper.make_node("ReduceSum", ["big"], ["z"], keepdims=0, name="sum"),
        ],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [])],
        [shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# ---------------------------------------------------------------------------- targets, mapping


def test_targets_one_table_with_published_figures() -> None:
    g, c = target("ipu2"), target(21)
    assert (g.tiles_per_ipu, g.memory_bytes_per_tile, g.num_worker_contexts) == (1472, TILE, 6)
    assert g.tile_clock_frequency == 1.33e9 and c.tile_clock_frequency == 1.5e9
    assert c.supports_fp8 and not g.supports_fp8
    # 62.5 / 250 TFLOPS (fp32 / fp16) for a GC200, within 1%.
    assert g.fp32_flops_per_cycle * 1472 * 1.33e9 == pytest.approx(62.5e12, rel=0.01)
    assert g.fp16_flops_per_cycle * 1472 * 1.33e9 == pytest.approx(250e12, rel=0.01)
    assert target("") is TARGETS["ipu2"]
    with pytest.raises(KeyError, match="ipu3"):
        target("ipu3")
    with pytest.raises(CompileError, match="< 1472"):
        CompilerOptions(num_io_tiles=1472)


def test_linear_map_grains_and_minimum_per_tile() -> None:
    tm = linear_map(131072, 4, 0, 0, 1472)  # 64 grains of 2 fp32 at least: 128 per tile
    assert (tm.ntiles, tm.per_tile, tm.last) == (1024, 128, 128)
    tm = linear_map(1_000_000, 2, 0, 0, 1472)  # 4 fp16 per grain, spread over every tile
    assert tm.per_tile == 4 * math.ceil(250_000 / 1472) == 680
    assert (tm.ntiles, tm.last) == (1471, 1_000_000 - 1470 * 680)
    tm = linear_map(10, 4, 0, 0, 1472, start=1471)  # a small tensor: one tile
    assert (tm.ntiles, tm.last, tm.rects(1472)) == (1, 10, [(1471, 1472, 40)])
    wrap = linear_map(1024, 4, 1, 0, 1472, start=1470).rects(1472)  # 8 tiles, wrapping, IPU 1
    assert wrap == [(2942, 2944, 512), (1472, 1477, 512), (1477, 1478, 512)]


# ---------------------------------------------------------------------------- memory by hand


def test_matmul_memory_per_tile_by_hand() -> None:
    exe = Compiler.compile(matmul_model(), ["y"])
    (mm,) = exe.program.program(exe.program.main_programs[0]).instrs
    assert mm.op == Op.MATMUL
    rep = exe.report()
    assert isinstance(rep, IPUModelReport) and rep.fits and rep.memory.shape == (1, 1472)
    cat = {k: v[0] for k, v in rep.categories.items()}
    # W [256, 512] fp32: 128 elements (512 bytes) on tiles 0..1023.
    assert (cat["weights"][:1024] == 512).all() and (cat["weights"][1024:] == 0).all()
    # x [8, 256] on tiles 0..15 and y [8, 512] on tiles 0..31 (512 bytes each), both live
    # at the MatMul: I/O anchors.
    assert (cat["io"][:16] == 1024).all() and (cat["io"][16:32] == 512).all()
    assert (cat["io"][32:] == 0).all() and (cat["activations"] == 0).all()
    # 128 output elements per tile, K = 256 split 4 ways (256 // 64) over 32 × 4 = 128 tiles:
    # a row of x (64 fp32; W, a weight, is laid out where it is used) + 128 × 3 float partial
    # sums.
    temp = 64 * 4 + 128 * 3 * 4
    assert temp == 1792
    assert (cat["temporaries"][:128] == temp).all() and (cat["temporaries"][128:] == 0).all()
    assert (cat["code"][:128] == 64).all() and (cat["code"][128:] == 0).all()
    mem = rep.memory[0]
    assert (mem[0], mem[20], mem[100], mem[1000], mem[1100]) == (
        512 + 1024 + temp + 64,
        512 + 512 + temp + 64,
        512 + temp + 64,
        512,
        0,
    )
    assert (sum(rep.categories.values()) == rep.memory).all()
    assert rep.worst_tiles(2) == [(0, 0, 3392), (0, 1, 3392)]
    big = rep.tensors[0]
    assert (big.name, big.category, big.nbytes, big.tiles) == ("W", "weights", 524288, 1024)


def test_matmul_cycles_by_hand_and_ipu21_clock() -> None:
    rep = Compiler.compile(matmul_model(), ["y"]).report()
    (c,) = rep.instructions
    assert (c.opcode, c.tiles, c.passes) == ("MATMUL", 128, 1)
    # 2 × 128 × 64 flops at 32 per cycle, + 128 × 3 partial adds at 2 per cycle.
    assert c.compute_cycles == 512 + 192
    assert c.exchange_cycles == 1792 // 4
    assert c.sync_cycles == 2 * 150  # the product and the reduction of partials
    assert rep.batch_cycles == c.cycles == 1452
    host = math.ceil((8 * 256 + 8 * 512) * 4 * 1.33e9 / 32e9)
    assert rep.host_io_cycles == host == 1022
    assert rep.latency_s == pytest.approx((1452 + 1022) / 1.33e9)
    assert rep.throughput == pytest.approx(1.33e9 / (1452 + 1022))

    fast = Compiler.compile(matmul_model(), ["y"], CompilerOptions(ipu_version="ipu21")).report()
    assert fast.target.ipu_version == "ipu21" and fast.batch_cycles == 1452
    assert fast.host_io_cycles == 1152  # 24576 bytes at 32 GB/s is 1152 cycles at 1.5 GHz
    assert fast.latency_s == pytest.approx((1452 + 1152) / 1.5e9)
    assert (fast.memory == rep.memory).all()


def test_available_memory_proportion_splits_into_passes_and_survives_a_file(tmp_path) -> None:
    opts = CompilerOptions(available_memory_proportion=0.001)  # 638 bytes of temporaries
    exe = Compiler.compile(matmul_model(), ["y"], opts)
    rep = exe.report()
    (c,) = rep.instructions
    assert c.passes == math.ceil(1792 / int(0.001 * TILE)) == 3
    assert c.temp_bytes == 598 and c.sync_cycles == 4 * 150
    assert (rep.categories["temporaries"][0, :128] == 598).all()
    path = tmp_path / "mm.popef"
    exe.save(path)
    loaded = Executable(path).report()
    assert loaded.to_dict() == rep.to_dict()
    assert loaded.available_memory_proportion == 0.001
    default = Compiler.compile(matmul_model(), ["y"]).report()
    assert default.instructions[0].passes == 1 and default.batch_cycles < rep.batch_cycles


def test_io_tiles_hold_the_stream_buffers() -> None:
    rep = Compiler.compile(matmul_model(), ["y"], CompilerOptions(num_io_tiles=32)).report()
    io = rep.categories["io"][0]
    # 1440 compute tiles; x (16 tiles) then y (32 tiles, wrapping) on the I/O tiles 1440..1471,
    # 512 bytes per tile each.
    assert (io[1440:1456] == 1024).all() and (io[1456:] == 512).all()
    assert (rep.categories["weights"][0, 1440:] == 0).all()
    assert "1440 compute + 32 I/O" in rep.summary()
    # Overlap I/O hides the host transfers of one batch behind the compute of another.
    assert rep.step_cycles == rep.batch_cycles + rep.host_io_cycles


def test_liveness_reuses_memory_of_dead_activations() -> None:
    """x → relu → relu → relu → y: at most two of the four 4 KiB values are live at once."""
    specs = tuple(TensorSpec(f"t{i}", DType.FLOAT32, (1024,), Location.ARENA, 0) for i in range(4))
    specs = tuple(
        TensorSpec(s.name, s.dtype, s.shape, Location.ARENA, 4096 * (i % 2))
        for i, s in enumerate(specs)
    )
    ir = ModelIR(
        tensors=specs,
        anchors=(Anchor("x", Direction.INPUT, 0), Anchor("y", Direction.OUTPUT, 3)),
        programs=(
            Program(0, ()),
            Program(1, tuple(Instr(Op.RELU, (i,), (i + 1,)) for i in range(3))),
        ),
        load_program=0,
        main_programs=(1,),
        arena_size=8192,
    )
    rep = estimate(ir)
    # t0 and t2 share a slot (offset 0), t1 and t3 another: every tensor on tiles 0..7.
    assert rep.memory[0, 0] == 2 * 512 + 3 * 64 and rep.memory[0, 8] == 0
    assert rep.categories["io"][0, 0] == 512 and rep.categories["activations"][0, 0] == 512
    relu = rep.instructions[0]
    assert (relu.compute_cycles, relu.exchange_cycles, relu.sync_cycles) == (64, 0, 150)


# ---------------------------------------------------------------------------- out of memory


def test_oversized_model_fails_naming_tensors_and_tiles() -> None:
    numel = 260_000_000  # 1.04 GB of fp32 > 1472 × 624 KiB
    with pytest.raises(IPUOutOfMemoryError) as info:
        Compiler.compile(expand_model(numel), ["z"])
    msg = str(info.value)
    per_tile = 2 * math.ceil(numel / 2 / 1472) * 4
    assert "'big' 1040000000 bytes (activations" in msg
    # Tile 0 also holds x (4 bytes) and the code of both instructions; tile 1 Expand's code.
    assert f"tile 0 of IPU 0: {per_tile + 4 + 128} bytes used, {TILE} available" in msg
    assert f"tile 1 of IPU 0: {per_tile + 64} bytes used" in msg
    assert "debug.allowOutOfMemory" in msg and "1472 tile(s) over" in msg
    assert isinstance(info.value, CompileError) and not info.value.report.fits
    with pytest.raises(IPUOutOfMemoryError):
        Compiler.compile_and_get_summary_report(expand_model(numel), ["z"])


def _numbers(rep: IPUModelReport) -> dict:
    d = rep.to_dict()
    for item in d["tensors"] + d["instructions"]:  # names: a loaded PopEF keeps the anchors' only
        item.pop("name", None)
        item.pop("output", None)
    return d


def test_popef_dump_prints_the_report(tmp_path, capsys) -> None:
    from pyipu.cli import popef_dump

    path = tmp_path / "mm.popef"
    Compiler.compile_and_export(matmul_model(), ["y"], str(path))
    assert popef_dump.main([str(path), "--report"]) == 0
    out = capsys.readouterr().out
    assert "IPU Model report" in out and "IPU 0 tile 0: 3392 bytes" in out


def test_allow_out_of_memory_compiles_and_labels(tmp_path) -> None:
    opts = CompilerOptions(engine_options={"debug.allowOutOfMemory": "true"})
    exe = Compiler.compile(expand_model(260_000_000), ["z"], opts)
    rep = exe.report()
    assert not rep.fits and not exe.fits and rep.allow_out_of_memory
    assert NOT_FIT_LABEL in repr(exe)
    assert NOT_FIT_LABEL.upper() in rep.summary()
    path = tmp_path / "big.popef"
    exe.save(path)
    loaded = Executable(path)
    assert not loaded.fits and _numbers(loaded.report()) == _numbers(rep)
    # the file's graph record (pyipu.sources) names internal tensors as at compile time
    assert [t.name for t in loaded.report().tensors] == [t.name for t in rep.tensors]
    text = Compiler.compile_and_get_summary_report(expand_model(260_000_000), ["z"], opts)
    assert NOT_FIT_LABEL.upper() in text and "'big' 1040000000 bytes" in text
    fits = Compiler.compile(matmul_model(), ["y"], opts)
    assert fits.fits and NOT_FIT_LABEL not in repr(fits)
    with pytest.raises(CompileError, match="allowOutOfMemory"):
        CompilerOptions(engine_options={"debug.allowOutOfMemory": "1"})


# ---------------------------------------------------------------------------- reports


def test_summary_report_text() -> None:
    text = Compiler.compile_and_get_summary_report(matmul_model(), ["y"], CompilerOptions())
    assert text.startswith("IPU Model report\nTarget: ipu2 (GC200")
    assert "Status: fits on the IPU" in text
    assert "IPU 0 tile 0: 3392 bytes (weights 512, activations 0, io 1024" in text
    assert "program 1 #0 matmul -> y (mm: MatMul) on 128 tiles: 1452 = 704 + 448 + 300" in text
    assert "'W' 524288 bytes (weights) on 1024 tile(s)" in text
    assert "Estimated: latency" in text and "batches/s" in text


def _sharded_ir(pipelined: bool) -> ModelIR:
    """Stage 0 (IPU 0): a = relu(x); copy a → b; stage 1 (IPU 1): y = relu(b)."""
    specs = tuple(
        TensorSpec(n, DType.FLOAT32, (1024,), Location.ARENA, 4096 * i)
        for i, n in enumerate("xaby")
    )
    return ModelIR(
        tensors=specs,
        anchors=(Anchor("x", Direction.INPUT, 0), Anchor("y", Direction.OUTPUT, 3)),
        programs=(
            Program(0, ()),
            Program(1, (Instr(Op.RELU, (0,), (1,)),)),
            Program(2, (Instr(Op.COPY, (1,), (2,)),)),
            Program(3, (Instr(Op.RELU, (2,), (3,)),)),
        ),
        load_program=0,
        main_programs=(1,),
        arena_size=4 * 4096,
        num_ipus=2,
        batches_per_step=4,
        stages=(Stage(1, 0, 2), Stage(3, 1)),
        pipelined=pipelined,
    )


@pytest.mark.parametrize("pipelined", [False, True])
def test_sharded_stages_map_to_their_ipus_and_copies_use_ipu_links(pipelined: bool) -> None:
    rep = estimate(_sharded_ir(pipelined))
    assert rep.memory.shape == (2, 1472)
    # x, a on IPU 0 tiles 0..7; b, y on IPU 1 tiles 0..7 (512 bytes per tile each).
    # The copy's code is counted on the receiving IPU.
    assert rep.memory[0, 0] == 2 * 512 + 64 and rep.memory[1, 0] == 2 * 512 + 2 * 64
    assert rep.memory[0, 8:].sum() == 0 and rep.memory[1, 8:].sum() == 0
    relu0, copy, relu1 = rep.instructions
    assert relu0.cycles == relu1.cycles == 64 + 150
    # 4096 bytes over a 64 GB/s IPU-Link (48 bytes per 1.33 GHz cycle) + an inter-IPU sync.
    assert (copy.exchange_cycles, copy.sync_cycles) == (math.ceil(4096 / 48), 1000)
    stage0, stage1 = 214 + 86 + 1000, 214
    assert rep.batch_cycles == stage0 + stage1
    host = math.ceil(8192 * 1.33e9 / 32e9)
    assert rep.host_io_cycles == host == 341
    assert rep.latency_s == pytest.approx((stage0 + stage1 + host) / 1.33e9)
    if pipelined:  # one batch per slowest stage once the pipeline is full
        assert rep.step_cycles == 4 * (stage0 + host) + stage1
    else:
        assert rep.step_cycles == 4 * (stage0 + stage1 + host)
    assert rep.throughput == pytest.approx(4 * 1.33e9 / rep.step_cycles)


def test_report_of_a_fused_model_covers_every_subgraph() -> None:
    from models import fusion_model0, fusion_model1

    from pyipu.compiler import fuse_models

    exe = Compiler.compile(fuse_models([fusion_model0(), fusion_model1()]), None)
    rep = exe.report()
    assert set(rep.program_cycles) == set(exe.program.main_programs)
    assert rep.batch_cycles == max(rep.program_cycles.values()) > 0
    assert {c.program for c in rep.instructions} == set(exe.program.main_programs)


def test_long_program_keeps_values_live_across_chunks() -> None:
    """x is read by the last of 601 instructions: live through every 256-position chunk. The
    relus run in place (one slot), so the peak (x, a, y) is at the last instruction only."""
    n = 600

    def spec(name: str, slot: int) -> TensorSpec:
        return TensorSpec(name, DType.FLOAT32, (1024,), Location.ARENA, 4096 * slot)

    specs = [spec("x", 0), spec("y", 1)] + [spec(f"a{i}", 2) for i in range(n)]
    instrs = [Instr(Op.RELU, (0 if i == 0 else i + 1,), (i + 2,)) for i in range(n)]
    instrs.append(Instr(Op.ADD, (n + 1, 0), (1,)))
    ir = ModelIR(
        tensors=tuple(specs),
        anchors=(Anchor("x", Direction.INPUT, 0), Anchor("y", Direction.OUTPUT, 1)),
        programs=(Program(0, ()), Program(1, tuple(instrs))),
        load_program=0,
        main_programs=(1,),
        arena_size=3 * 4096,
    )
    rep = estimate(ir)
    assert rep.memory[0, 0] == 3 * 512 + (n + 1) * 64
    assert rep.categories["io"][0, 0] == 2 * 512 and rep.categories["activations"][0, 0] == 512


def test_malformed_settings_blob_is_a_clear_error() -> None:
    ir = _sharded_ir(False)
    bad = ModelIR(**{**ir.__dict__, "opaque": (("pyipu.ipu_model", b"{not json"),)})
    with pytest.raises(ValueError, match="malformed 'pyipu.ipu_model'"):
        estimate(bad)
