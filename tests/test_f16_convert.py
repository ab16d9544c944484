"""The kernels' bulk float16 <-> float32 conversions (f16cvt.c) against numpy's float16, at
every level the CPU runs (portable, F16C, AVX-512F), over every half bit pattern and over
float32 values that probe the rounding: ties to even, subnormals, overflow, inf and NaN."""

from __future__ import annotations

import numpy as np

from pyipu import _core


def _same_f32(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, except that any NaN matches a NaN (payload quieting may differ)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def test_every_half_to_float(isa_level: int) -> None:
    halves = np.arange(1 << 16, dtype=np.uint16)
    # odd lengths exercise the vector loops' tails
    for n in (1 << 16, 65533, 17, 15, 7, 1):
        _same_f32(_core.f16_to_f32(halves[:n]), halves[:n].view(np.float16).astype(np.float32))


def _probe_floats() -> np.ndarray:
    rng = np.random.default_rng(0)
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)].astype(np.float32)
    # the midpoints between neighbouring halves (ties: even wins) and a float32 ulp either side
    mid = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, -np.inf)])
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            65504.0,
            65519.99,
            65520.0,
            1e6,
            -1e6,
            2.0**-24,
            2.0**-25,
            2.0**-25 * 1.0001,
            2.0**-26,
            1e-30,
            -1e-30,
            2.0**-14,
            2.0**-14 * (1 - 2.0**-11),
        ],
        np.float32,
    )
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([finite, mid, near, special, bits]).astype(np.float32)


def test_floats_to_half_round_to_nearest_even(isa_level: int) -> None:
    x = _probe_floats()
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    for n in (x.size, x.size - 3, 13, 1):
        got = _core.f32_to_f16(x[:n]).view(np.float16)
        nan = np.isnan(want[:n])
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got.view(np.uint16)[~nan], want[:n].view(np.uint16)[~nan])
