"""Manual sharding: throughput of a 2-stage model on 2 compute threads, sequential stages vs the
stage pipeline, side by side in one run.

    pytest benchmarks/bench_pipelining.py --benchmark-columns=median,ops,rounds

Each stage is a chain of small MatMul + Relu layers on [8, 128] activations: every instruction
is below the size at which the runtime splits it over workers, so without pipelining one thread
computes while the other waits; pipelined, the two stages compute different batches at once.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.sharding import Sharder

WIDTH, ROWS, LAYERS = 128, 8, 24
BPS = 8
REQUESTS = 8  # per round, each of BPS batches


def chain_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", f, [ROWS, WIDTH])],
        [helper.make_tensor_value_info(x, f, [ROWS, WIDTH])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def compile_two_stages(pipelined: bool):
    half = f"relu{LAYERS // 2 - 1}"
    model = Sharder({half: 0}, {half: 0}).run(chain_model())
    options = CompilerOptions()
    options.virtual_graph_mode = "manual"
    options.num_ipus = 2
    options.enable_pipelining = pipelined
    options.batches_per_step = BPS
    return Compiler.compile(model, None, options)


@pytest.mark.benchmark(group="pipelining")
@pytest.mark.parametrize("pipelined", [False, True], ids=["sequential", "pipelined"])
def test_pipelining_throughput(benchmark, pipelined):
    exe = compile_two_stages(pipelined)
    x = np.ones((ROWS * BPS, WIDTH), np.float32)
    out_name = exe.output_names[0]
    y = np.empty((ROWS * BPS, WIDTH), np.float32)
    config = runtime.RuntimeConfig(timeout_ns=0, num_threads=2)
    with runtime.Runner(exe, config) as runner:

        def feed() -> None:
            for _ in range(REQUESTS):
                runner.execute({"x": x}, {out_name: y})

        feed()  # warm-up
        benchmark.pedantic(feed, rounds=7, iterations=1)
        stats = runner.stats()
        benchmark.extra_info["batches_per_round"] = REQUESTS * BPS
        benchmark.extra_info["concurrent_ticks"] = stats["concurrent_ticks"]
