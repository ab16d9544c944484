"""`pyipu-demo`: compile Graphcore's overlap-I/O example model and run it, like the PopRT seed.

Builds the seed model (Expand → 4 × MatMul with a shared [4,4,256,256] weight → ReduceMean),
compiles it to a PopEF executable, checks the result against NumPy, then feeds it from several
threads and prints the throughput.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

FLOPS_PER_INFERENCE = 4 * 16 * 2 * 256**3  # 4 batched MatMuls of 16 × 256³


def seed_overlap_io_model(seed: int = 0, weight_scale: float = 1.0) -> onnx.ModelProto:
    """The overlap-I/O seed model as Graphcore builds it (opset 11): the graph output is declared
    (256, 256) while ReduceMean yields [1, 1, 256, 256]. `weight_scale` < 1 keeps activations
    O(1) through the four MatMuls (the seed's N(0, 1) weights grow them by ~16 each)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((4, 4, 256, 256)) * weight_scale).astype(np.float32)
    nodes = [helper.make_node("Expand", ["input", "shape"], ["Act0"])]
    nodes += [helper.make_node("MatMul", [f"Act{i}", "Weight"], [f"Act{i + 1}"]) for i in range(4)]
    nodes.append(helper.make_node("ReduceMean", ["Act4"], ["output"], axes=[0, 1]))
    graph = helper.make_graph(
        nodes,
        "matmul_test",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, (256, 256))],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, (256, 256))],
        [
            helper.make_tensor("shape", TensorProto.INT64, [4], np.array([4, 4, 256, 256])),
            helper.make_tensor("Weight", TensorProto.FLOAT, weight.shape, weight.ravel()),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def demo_model(seed: int = 0) -> onnx.ModelProto:
    """The seed model as a clean ONNX file for examples: its output declared as ReduceMean
    computes it ([1, 1, 256, 256]), weights scaled so activations stay O(1), and named nodes
    (expand, matmul0..matmul3, mean) to place with a sharding config."""
    model = seed_overlap_io_model(seed, weight_scale=1 / 16)
    names = ["expand", "matmul0", "matmul1", "matmul2", "matmul3", "mean"]
    for node, name in zip(model.graph.node, names, strict=True):
        node.name = name
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in (1, 1, 256, 256):
        dims.add().dim_value = d
    return model


def seed_reference(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    act = np.broadcast_to(x, (4, 4, 256, 256))
    for _ in range(4):
        act = act @ weight
    return act.mean(axis=(0, 1))


def main(argv: list[str] | None = None) -> int:
    import warnings

    from pyipu import runtime
    from pyipu.compiler import Compiler, CompilerOptions

    p = argparse.ArgumentParser(prog="pyipu-demo", description=__doc__)
    p.add_argument("--batches_per_step", type=int, default=16)
    p.add_argument("--num_io_tiles", type=int, default=192)
    p.add_argument("--threads", type=int, default=3, help="caller threads (default 3)")
    p.add_argument("--requests", type=int, default=16, help="requests per thread")
    p.add_argument(
        "--save_model",
        metavar="PATH",
        help="write the demo model (demo_model(): the seed model, warning-free) to PATH and exit",
    )
    args = p.parse_args(argv)
    if args.save_model:
        onnx.save(demo_model(), args.save_model)
        print(f"Saved the demo model to {args.save_model}")
        return 0

    model = seed_overlap_io_model()
    weight = onnx.numpy_helper.to_array(model.graph.initializer[1])
    options = CompilerOptions()
    options.batches_per_step = args.batches_per_step
    options.num_io_tiles = args.num_io_tiles
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the seed declares output (256,256) for [1,1,256,256]
        executable = Compiler.compile(model.SerializeToString(), ["output"], options)
    print(f"Compiled the overlap-I/O seed model in {time.perf_counter() - start:.2f} s")

    config = runtime.RuntimeConfig()
    config.timeout_ns = 0
    with runtime.Runner(executable, config) as runner:
        for d in runner.get_execute_inputs() + runner.get_execute_outputs():
            print(f"  anchor {d.name}: {d.numpy_data_type()} {d.shape}")
        x = np.random.default_rng(1).uniform(0, 1, (256, 256)).astype(np.float32)
        out = np.zeros((256, 256), np.float32)
        runner.execute({"input": x}, {"output": out})
        ref = seed_reference(x.astype(np.float64), weight.astype(np.float64))
        rel = float(np.abs(out - ref).max() / np.abs(ref).max())
        print(f"Result: output[0,:4] = {out[0, :4]}; max error vs NumPy (fp64) = {rel:.2e}")
        if not rel < 1e-4:
            print("Result check FAILED")
            return 1

        def feed() -> None:
            xi = np.random.default_rng().uniform(0, 1, (256, 256)).astype(np.float32)
            oi = np.zeros((256, 256), np.float32)
            for _ in range(args.requests):
                runner.execute({"input": xi}, {"output": oi})

        threads = [threading.Thread(target=feed) for _ in range(args.threads)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        total = args.threads * args.requests
        rate = total / elapsed
        print(
            f"Throughput: {total} requests from {args.threads} threads in {elapsed:.2f} s = "
            f"{rate:.1f} inferences/s ({rate * FLOPS_PER_INFERENCE / 1e9:.1f} GFLOP/s, "
            f"{runner.stats()['num_threads']} compute threads)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
