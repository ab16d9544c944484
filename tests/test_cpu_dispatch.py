"""Which sgemm micro-kernel runs by default, read against /proc/cpuinfo (gemm_f32.c, auto_isa)."""

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
    _core.set_sgemm_isa(0)


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists(),
    reason="x86-64 Linux only",
)
def test_auto_is_the_best_level_except_avx2_on_zen4() -> None:
    vendor, family, flags = cpu()
    if {"avx2", "fma"} <= flags:
        best = 3 if "avx512f" in flags else 2
    else:
        best = 1
    want = 2 if best == 3 and vendor == "AuthenticAMD" and family == 0x19 else best
    assert _core.set_sgemm_isa(0) == want
    # every level the CPU runs can still be forced (the kernel tests run each one)
    for isa in range(1, best + 1):
        assert _core.set_sgemm_isa(isa) == isa
    assert _core.set_sgemm_isa(best + 1) == want
