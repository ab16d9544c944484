"""Manual sharding and pipelining: a 3-stage MLP on 3 virtual IPUs.

    python examples/sharding/sharding.py

Places the nodes with shard.yaml (the same list `pyipu --manual_sharding_config` reads), compiles
the model sequentially sharded and pipelined, runs both and the unsharded model on the C runtime
and checks that all three give identical results. The same placement in Python:
`Sharder(sharding_info={"relu1": 0, "relu2": 1}, pipelining_info={"relu1": 0, "relu2": 1})`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions
from pyipu.compiler.sharding import load_sharding_config, manual_sharding

WIDTH, ROWS, BPS = 256, 16, 6


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((WIDTH, WIDTH)) / 16).astype(np.float32), f"w{i}"
        )
        for i in (1, 2, 3)
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "w3"], ["h3"], name="mm3"),
        helper.make_node("Add", ["h3", "x"], ["y"], name="residual"),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", f, [ROWS, WIDTH])],
        [helper.make_tensor_value_info("y", f, [ROWS, WIDTH])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(exe, x: np.ndarray) -> tuple[np.ndarray, dict]:
    with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2)) as runner:
        y = np.empty_like(x)
        runner.execute({"x": x}, {"y": y})
        return y, runner.stats()


def main() -> None:
    sharding, pipelining = load_sharding_config(Path(__file__).with_name("shard.yaml"))
    model = mlp()
    sharded = manual_sharding(model, sharding, pipelining)
    x = np.random.default_rng(1).standard_normal((ROWS * BPS, WIDTH)).astype(np.float32)

    plain = CompilerOptions()
    plain.batches_per_step = BPS
    want, _ = run(Compiler.compile(model, None, plain), x)
    for pipelined in (False, True):
        opts = CompilerOptions()
        opts.virtual_graph_mode = "manual"
        opts.num_ipus = 3
        opts.enable_pipelining = pipelined
        opts.batches_per_step = BPS  # a multiple of the 3 pipeline stages
        exe = Compiler.compile(sharded, None, opts)
        got, stats = run(exe, x)
        assert np.array_equal(got, want), "sharded results differ from the unsharded model"
        mode = "pipelined" if pipelined else "sequential"
        print(
            f"{mode}: {len(exe.program.stages)} stages on IPUs "
            f"{[s.ipu for s in exe.program.stages]}, identical results; "
            f"ticks with concurrent stages: {stats['concurrent_ticks']}"
        )


if __name__ == "__main__":
    main()
