"""The CPU-feature probe (kernels/isa.c) and the sgemm micro-kernel chosen by default
(gemm_f32.c, sgemm_isa), read against /proc/cpuinfo; the one switch forcing a level."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from proc_cpuinfo import first_cpu

from pyipu import _config, _core
from pyipu.errors import InvalidArgumentError


def cpu() -> tuple[str, int, set[str]]:
    """Vendor, family and flags of the first CPU in /proc/cpuinfo."""
    fields = first_cpu()
    return fields["vendor_id"], int(fields["cpu family"]), set(fields["flags"].split())


@pytest.fixture(autouse=True)
def auto_afterwards() -> Iterator[None]:
    yield
    _core.set_isa(0)


def test_levels_are_named_once() -> None:
    assert _core.ISA_LEVELS == {"portable": 1, "avx2": 2, "avx512": 3}


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists(),
    reason="x86-64 Linux only",
)
def test_auto_is_the_best_level_except_avx2_sgemm_on_zen4() -> None:
    vendor, family, flags = cpu()
    if {"avx2", "fma", "f16c"} <= flags:
        best = 3 if "avx512f" in flags else 2
    else:
        best = 1
    assert _core.isa_best() == best
    assert _core.set_isa(0) == best
    want = 2 if best == 3 and vendor == "AuthenticAMD" and family == 0x19 else best
    assert _core.sgemm_isa() == want
    # every level the CPU runs can still be forced, the sgemm micro-kernel's too
    for isa in range(1, best + 1):
        assert _core.set_isa(isa) == isa
        assert _core.sgemm_isa() == isa
    # a level the CPU does not run, or a negative one, means automatic
    assert _core.set_isa(best + 1) == best
    assert _core.sgemm_isa() == want
    assert _core.set_isa(-1) == best


def test_portable_is_always_available() -> None:
    assert _core.set_isa(1) == 1
    assert _core.sgemm_isa() == 1


def test_pyipu_isa_forces_the_level_for_a_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    from models import run_c, scale_model

    from pyipu.compiler import Compiler

    exe = Compiler.compile(scale_model())
    feeds = {"X": np.arange(12, dtype=np.float32).reshape(4, 3)}
    assert _core.set_isa(0) == _core.isa_best()
    monkeypatch.setenv("PYIPU_ISA", "portable")
    np.testing.assert_array_equal(run_c(exe, feeds)["Y"], 2 * feeds["X"] + 1)
    assert _core.sgemm_isa() == 1
    monkeypatch.setenv("PYIPU_ISA", "")  # empty: the level is left as it is
    run_c(exe, feeds)
    assert _core.sgemm_isa() == 1


@pytest.mark.parametrize("value", ["AVX2", "sse", "3", " portable x"])
def test_pyipu_isa_rejects_unknown_names(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PYIPU_ISA", value)
    with pytest.raises(InvalidArgumentError, match="PYIPU_ISA"):
        _config.apply_isa()


def test_pyipu_isa_rejects_a_level_the_cpu_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {level: name for name, level in _core.ISA_LEVELS.items()}
    if _core.isa_best() == max(names):
        pytest.skip("this CPU runs every level")
    monkeypatch.setenv("PYIPU_ISA", names[_core.isa_best() + 1])
    with pytest.raises(InvalidArgumentError, match="does not run"):
        _config.apply_isa()


def _session_outputs(exe, feeds: dict[str, np.ndarray], like: dict[str, np.ndarray]) -> dict:
    """One step of a model_runtime.Session (pyipu._session) with outputs shaped as `like`."""
    from pyipu.model_runtime import Session

    outputs = {name: np.zeros_like(a) for name, a in like.items()}
    with Session(exe) as session:
        qm = session.create_queue_manager()
        session.run_load_programs()
        for name, x in feeds.items():
            qm.input_queue(name).enqueue(x)
        for name, y in outputs.items():
            qm.output_queue(name).enqueue(y)
        session.run_main_programs()
    return outputs


def test_forced_level_is_one_switch_for_sessions_and_runners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The extension modules share one libipu.so, so one forced level: a Session (_session)
    and a Runner (_core's Runtime, _fast_path) give the same bits under each level, and the
    levels give different bits (the portable MatMul does not fuse its multiply-adds)."""
    from models import F32, arr, compile_single_op, run_c

    best = _core.isa_best()
    if best == 1:
        pytest.skip("only the portable level on this CPU")
    monkeypatch.delenv("PYIPU_ISA", raising=False)  # the runner would apply it
    exe, feeds, _ = compile_single_op("MatMul", [arr((8, 64), F32, 1), arr((64, 8), F32, 2)])
    runner = {}
    for level in (1, best):
        assert _core.set_isa(level) == level
        runner[level] = run_c(exe, feeds)
        session = _session_outputs(exe, feeds, runner[level])
        assert _core.sgemm_isa() == level
        for name, y in runner[level].items():
            np.testing.assert_array_equal(session[name], y, err_msg=f"level {level}")
    ((name, portable),) = runner[1].items()
    assert not np.array_equal(portable, runner[best][name])
