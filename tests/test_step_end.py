"""The step-end program of a sharded executable: compiled from `__step_end` nodes, written in the
stage table, run by the runtime once after every step (after a pipeline drained)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import step_end_model, step_end_reference
from onnx import helper

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions, Executable
from pyipu.compiler.errors import CompileError
from pyipu.compiler.ir import NO_INDEX
from pyipu.compiler.serialize import CorruptFileError
from pyipu.compiler.variables import set_variables


def _options(pipelined: bool, bps: int) -> CompilerOptions:
    o = CompilerOptions()
    o.virtual_graph_mode = "manual"
    o.num_ipus = 2
    o.enable_pipelining = pipelined
    o.batches_per_step = bps
    return o


def _run(exe: Executable, xs: np.ndarray, threads: int) -> tuple[np.ndarray, dict, dict]:
    """Every batch of `xs` (batches stacked on dim 0 of one request)."""
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=threads)) as r:
        zs = np.zeros((len(xs) * 2, 3), np.float32)
        r.execute({"X": xs.reshape(-1, 3)}, {"Z": zs})
        return zs.reshape(xs.shape), r.read_variables(), r.stats()


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("bps", [1, 3, 4])
@pytest.mark.parametrize("threads", [1, 2])
def test_step_end_runs_once_per_step_after_the_stages(pipelined, bps, threads):
    exe = Compiler.compile(step_end_model(), None, _options(pipelined, bps))
    prog = exe.program
    assert prog.step_end_program != NO_INDEX and len(prog.stages) == 2
    assert exe.native().get_info()["step_end_program"] == prog.step_end_program
    xs = np.random.default_rng(bps).standard_normal((4 * bps, 2, 3)).astype(np.float32)
    zs, variables, stats = _run(exe, xs, threads)
    want_z, want_vars = step_end_reference(xs, bps)
    np.testing.assert_allclose(zs, want_z, rtol=1e-6, atol=1e-6)
    for name, want in want_vars.items():
        np.testing.assert_allclose(variables[name], want, rtol=1e-6, atol=1e-6, err_msg=name)
    assert stats["steps"] == 4
    if pipelined and bps > 1:
        assert stats["pipeline_ticks"] == 4 * (bps + 1)


def test_the_reference_interpreter_runs_the_step_end_program():
    from pyipu.reference import run

    exe = Compiler.compile(step_end_model(), None, _options(True, 3))
    xs = np.random.default_rng(5).standard_normal((7, 2, 3)).astype(np.float32)
    got = run(exe.program, {"X": xs.reshape(-1, 3)})["Z"].reshape(xs.shape)
    np.testing.assert_allclose(got, step_end_reference(xs, 3)[0], rtol=1e-6, atol=1e-6)


def test_step_end_survives_the_popef_round_trip(tmp_path):
    exe = Compiler.compile(step_end_model(), None, _options(True, 2))
    exe.save(tmp_path / "m.popef")
    back = Executable.open(tmp_path / "m.popef")
    assert back.program.step_end_program == exe.program.step_end_program
    xs = np.ones((4, 2, 3), np.float32)
    _, variables, _ = _run(back, xs, 2)
    assert float(variables["COUNT"]) == 2.0
    assert "step end" in back.program.summary()


def test_a_step_end_program_that_does_not_exist_is_corrupt(tmp_path):
    import dataclasses

    exe = Compiler.compile(step_end_model(), None, _options(True, 2))
    bad = dataclasses.replace(exe.program, step_end_program=99)
    Executable.from_program(bad).save(tmp_path / "bad.popef")
    with pytest.raises(CorruptFileError, match="step-end program 99"):
        runtime.Runner(str(tmp_path / "bad.popef"))


def _edited(reads: str | None = None, output: str | None = None) -> onnx.ModelProto:
    m = step_end_model()
    for n in m.graph.node:
        if reads is not None and n.output[0] == "scaled":
            n.input[0] = reads
    if output is not None:
        m.graph.output.append(helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    return m


def test_the_step_end_reads_only_variables_inputs_and_its_own_values():
    with pytest.raises(CompileError, match="step-end program reads 'Y'"):
        Compiler.compile(_edited(reads="Y"), None, _options(True, 2))
    exe = Compiler.compile(_edited(reads="X"), None, _options(True, 2))  # an input: allowed
    xs = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    _, variables, _ = _run(exe, xs, 2)
    assert float(variables["COUNT"]) == 2.0


def test_an_output_of_the_step_end_is_refused():
    with pytest.raises(CompileError, match="computed by the step-end program"):
        Compiler.compile(_edited(output="scaled"), None, _options(True, 2))


def test_pipelined_stages_may_not_write_a_variable_another_stage_reads():
    """W updated in stage 1 while stage 0 reads it: the verifier's race proof refuses it."""
    m = step_end_model()
    for n in m.graph.node:
        if n.output[0] in ("scaled", "W_new"):
            del n.attribute[:]
            n.attribute.extend(
                [
                    helper.make_attribute("__ipu_number", 1),
                    helper.make_attribute("__pipeline_stage", 1),
                ]
            )
    with pytest.raises(Exception, match="run concurrently"):
        exe = Compiler.compile(m, None, _options(True, 2))
        runtime.Runner(exe)
    set_variables(m, {"SUM": "SUM_new"})  # sequential stages may: no race
    Compiler.compile(m, None, _options(False, 2))
