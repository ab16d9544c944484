"""Compile time of the light CNNs (ResNet50 is the acceptance case: ≤ 2 s on 2 cores), and the
share of it the IPU Model's estimate (tile mapping, memory, cycles) takes.

    pytest benchmarks/bench_compile.py --benchmark-columns=median,min,rounds
"""

from __future__ import annotations

import light_models
import pytest

from pyipu.compiler import Compiler
from pyipu.compiler.compiler import compile_ir
from pyipu.compiler.ipu_model import estimate


@pytest.fixture(scope="module")
def resnet50():
    return light_models.with_logits(light_models.with_random_weights(light_models.load("resnet50")))


def test_compile_resnet50(benchmark, resnet50) -> None:
    exe = benchmark.pedantic(Compiler.compile, args=(resnet50,), rounds=5, iterations=1)
    assert exe.report().fits


def test_ipu_model_estimate_resnet50(benchmark, resnet50) -> None:
    ir = compile_ir(resnet50)
    rep = benchmark.pedantic(estimate, args=(ir,), rounds=10, iterations=1)
    assert rep.batch_cycles > 0
