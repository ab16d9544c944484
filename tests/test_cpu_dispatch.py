"""The CPU-feature probe (kernels/isa.c) and the sgemm micro-kernel chosen by default
(gemm_f32.c, sgemm_isa), read against /proc/cpuinfo; the one switch forcing a level."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import pytest
from proc_cpuinfo import first_cpu

from pyipu import _core


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
