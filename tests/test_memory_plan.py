"""Memory placement (memory.place): the interval index gives exactly the placement of the
direct greedy rule (every placed root checked), which stays the specification here."""

from __future__ import annotations

import numpy as np
import pytest

from pyipu.compiler.ir import NO_INDEX, align
from pyipu.compiler.memory import Lifetime, place


def _place_direct(sizes: dict[int, int], lives: dict[int, Lifetime]) -> tuple[dict, int]:
    """Largest first, lowest 64-aligned offset clear of every overlapping placed root."""
    offsets: dict[int, int] = {}
    for r in sorted(sizes, key=lambda r: (-sizes[r], lives[r].start, r)):
        size = align(max(sizes[r], 1))
        busy = sorted(
            (offsets[p], offsets[p] + align(max(sizes[p], 1)))
            for p in offsets
            if lives[p].overlaps(lives[r])
        )
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, hi)
        offsets[r] = at
    arena = max((offsets[r] + align(max(sizes[r], 1)) for r in offsets), default=0)
    return offsets, align(arena)


@pytest.mark.parametrize("seed", range(40))
def test_place_matches_the_direct_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    length = int(rng.integers(1, 60))
    subgraphs = int(rng.integers(1, 4))
    sizes: dict[int, int] = {}
    lives: dict[int, Lifetime] = {}
    for r in range(n):
        sizes[r] = int(rng.choice([0, 4, 64, 100, 256, 1000, 4096]))
        kind = rng.random()
        if kind < 0.05:
            lives[r] = Lifetime(int(rng.integers(subgraphs)), 0, -1)  # unused
        elif kind < 0.1:
            lives[r] = Lifetime(NO_INDEX, -1, int(rng.integers(0, length + 1)))
        else:
            a, b = sorted(int(x) for x in rng.integers(-1, length + 1, 2))
            lives[r] = Lifetime(int(rng.integers(subgraphs)), a, b)
    assert place(sizes, lives) == _place_direct(sizes, lives)


def test_place_of_a_long_chain_reuses_two_buffers() -> None:
    n = 20_000
    lives = {r: Lifetime(0, r, r + 1) for r in range(n)}
    offsets, arena = place(dict.fromkeys(lives, 4096), lives)
    assert arena == 2 * 4096 and len(set(offsets.values())) == 2
