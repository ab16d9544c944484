"""Compile time of ResNet50 (onnx's `light` model), cold and from the engine cache, beside ONNX
Runtime's session creation for the same file, in one run; and of chains of 1k, 8k and 20k
element-wise nodes, which show how compile time grows with the tensor count.

    pytest benchmarks/bench_compile.py --benchmark-columns=median,min,max,rounds

Targets: a ResNet50 cold compile <= 2 s on the 2-core machine (the IPU Model estimate
included, also timed alone), a cache hit <= 0.1 s; a 20k-node chain < 5 s.
"""

from __future__ import annotations

import tempfile

import onnx
import onnxruntime as ort
import pytest
from light_models import LIGHT_DIR
from onnx import TensorProto, helper

from pyipu.compiler import Compiler, CompilerOptions

MODEL = str(LIGHT_DIR / "light_resnet50.onnx")


@pytest.mark.benchmark(group="compile_resnet50")
def test_compile_cold(benchmark):
    exe = benchmark.pedantic(lambda: Compiler.compile(MODEL), rounds=3, iterations=1)
    assert exe.output_names


@pytest.mark.benchmark(group="compile_resnet50")
def test_compile_cache_hit(benchmark):
    with tempfile.TemporaryDirectory() as cache:
        opts = CompilerOptions.from_dict({"enable_engine_caching": True, "cache_path": cache})
        Compiler.compile(MODEL, None, opts)  # fills the cache
        exe = benchmark.pedantic(lambda: Compiler.compile(MODEL, None, opts), rounds=10)
        assert exe.output_names


@pytest.mark.benchmark(group="compile_resnet50")
def test_onnxruntime_session_creation(benchmark):
    def create() -> ort.InferenceSession:
        return ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])

    session = benchmark.pedantic(create, rounds=3, iterations=1)
    assert session.get_outputs()


@pytest.mark.benchmark(group="compile_resnet50")
def test_ipu_model_estimate(benchmark):
    """The IPU Model's share of a cold compile: tile mapping, memory over time, cycles."""
    from pyipu.compiler.compiler import compile_ir
    from pyipu.compiler.ipu_model import estimate

    ir = compile_ir(MODEL)
    rep = benchmark.pedantic(lambda: estimate(ir), rounds=10, iterations=1)
    assert rep.fits and rep.batch_cycles > 0


def chain_model(nodes: int) -> onnx.ModelProto:
    """x -> Relu -> Sigmoid -> Tanh -> Relu ... (`nodes` nodes), float32[1, 64]."""
    ops = ("Relu", "Sigmoid", "Tanh")
    names = ["x", *(f"t{i}" for i in range(nodes - 1)), "y"]
    graph = helper.make_graph(
        [helper.make_node(ops[i % 3], [names[i]], [names[i + 1]]) for i in range(nodes)],
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.benchmark(group="compile_chain")
@pytest.mark.parametrize("nodes", [1000, 8000, 20000])
def test_compile_chain(benchmark, nodes, quick):
    model = chain_model(nodes)
    # The IPU Model counts 64 bytes of code per instruction on one tile: a 20k-instruction
    # program does not fit, which is not what is measured here.
    opts = CompilerOptions.from_dict({"engine_options": {"debug.allowOutOfMemory": "true"}})
    rounds = 2 if quick or nodes > 8000 else 3
    exe = benchmark.pedantic(lambda: Compiler.compile(model, None, opts), rounds=rounds)
    assert exe.output_names == ["y"]
