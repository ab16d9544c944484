"""Every distinct Conv of a benchmark CNN timed alone, pyipu against ONNX Runtime.

    python tools/conv_layers.py resnet50 shufflenet [--threads 2] [--whole]

Each distinct (input shape, weight shape, strides, pads, group) becomes a one-node model
(Conv + bias, random weights) compiled like the benchmarks; both runtimes alternate call by
call (`--calls` each, same thread count) and the medians are compared. Sorted by pyipu's total
time in the model (time × occurrences): the shapes to fix first come first. A layer's time
includes the request's input and output copies, which small layers feel most. `--whole` also
times the whole model the same way (tools/perf_table.py is the reference for models).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]


def conv_configs(model: onnx.ModelProto) -> dict[tuple, tuple[onnx.NodeProto, list[int], int]]:
    """key -> (node, input shape, occurrences) for each distinct 2-D Conv."""
    from side_by_side import compile_model

    # pyipu's compiled tensors carry the ONNX value names with resolved shapes (onnx's shape
    # inference leaves some of these models' Reshape outputs unknown).
    shapes = {t.name: list(t.shape) for t in compile_model(model).program.tensors}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    out: dict[tuple, tuple[onnx.NodeProto, list[int], int]] = {}
    for node in model.graph.node:
        if node.op_type != "Conv" or len(shapes.get(node.input[0], [])) != 4:
            continue
        attrs = tuple(sorted((a.name, tuple(helper.get_attribute_value(a)) if a.ints else
                              helper.get_attribute_value(a)) for a in node.attribute))  # fmt: skip
        key = (tuple(shapes[node.input[0]]), tuple(inits[node.input[1]]), attrs)
        prev = out.get(key)
        out[key] = (node, shapes[node.input[0]], (prev[2] if prev else 0) + 1)
    return out


def single_conv(
    node: onnx.NodeProto, x_shape: list[int], w_shape: tuple[int, ...]
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = (rng.standard_normal(w_shape[0]) * 0.05).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"])
    conv.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [conv],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    )


def time_pair(a, b, calls: int, settle: bool = False) -> tuple[float, float]:
    """Median seconds of a() and b(), alternating; settle: wait for the other side's worker
    threads to stop spinning before each call (they take a core on a 2-core machine)."""
    from side_by_side import wait_until_idle

    ta, tb = [], []
    a(), b()
    for _ in range(calls):
        for fn, acc in ((a, ta), (b, tb)):
            if settle:
                wait_until_idle()
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main(argv: list[str] | None = None) -> int:
    from light_models import load, with_random_weights
    from side_by_side import OrtEngine, PyipuEngine, compile_model, ort_session

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="+", help="light CNN names (tests/light_models.py)")
    ap.add_argument("--calls", type=int, default=7)
    ap.add_argument("--top", type=int, default=12, help="rows per model")
    ap.add_argument("--threads", type=int, default=1, help="each runtime's compute threads")
    ap.add_argument("--whole", action="store_true", help="also time the whole model")
    args = ap.parse_args(argv)
    settle = args.threads > 1

    def timed(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[float, float]:
        p = PyipuEngine(compile_model(model), feeds, args.threads)
        o = OrtEngine(ort_session(model, args.threads), feeds)
        try:
            return time_pair(p, o, args.calls, settle)
        finally:
            p.close()

    for name in args.models:
        full = with_random_weights(load(name))
        rows = []
        for (xs, ws, _), (node, x_shape, count) in conv_configs(full).items():
            model = single_conv(node, x_shape, ws)
            feeds = {"x": np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)}
            tp, to = timed(model, feeds)
            y = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
            flop = 2 * np.prod(y) * np.prod(ws[1:])
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            desc = (
                f"x{list(xs)[1:]} w{list(ws)} s{list(attrs.get('strides', [1, 1]))} "
                f"g{attrs.get('group', 1)}"
            )
            rows.append((tp * count, desc, count, tp, to, flop / tp / 1e9, flop / to / 1e9))
        rows.sort(reverse=True)
        total_p = sum(r[0] for r in rows)
        total_o = sum(r[4] * r[2] for r in rows)
        print(
            f"#### {name}, {args.threads} thread(s): Conv alone, pyipu {total_p * 1e3:.1f} ms, "
            f"ORT {total_o * 1e3:.1f} ms"
        )
        print()
        print("| conv (x without N, w, strides, group) | × | pyipu ms | ORT ms | pyipu/ORT | "
              "pyipu GF/s | ORT GF/s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for _, desc, count, tp, to, gp, go in rows[: args.top]:
            print(
                f"| {desc} | {count} | {tp * 1e3:.2f} | {to * 1e3:.2f} | {to / tp:.2f} | "
                f"{gp:.0f} | {go:.0f} |"
            )
        if args.whole:
            inits = {i.name for i in full.graph.initializer}
            x = next(i for i in full.graph.input if i.name not in inits)
            shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
            feeds = {x.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
            tp, to = timed(full, feeds)
            print(
                f"\nwhole model: pyipu {tp * 1e3:.2f} ms, ORT {to * 1e3:.2f} ms, "
                f"pyipu/ORT throughput {to / tp:.2f}"
            )
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
