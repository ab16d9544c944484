"""Depthwise float32 convolutions (one-node Conv models, group = C) against ONNX Runtime.

The shapes of MobileNetV2/V3, EfficientNet and MnasNet: 3x3, 5x5 and 7x7 kernels, "same"
padding, stride 1, each bare and with a bias and a fused activation (Relu, or Clip 0..6 as
ReLU6). Per shape, pyipu and ONNX Runtime calls alternate (`interleaved`); the median of each
is printed with the ratio ORT / pyipu (above 1: pyipu faster).

    python3 -P benchmarks/depthwise_side_by_side.py [--threads 1] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from side_by_side import OrtEngine, PyipuEngine, compile_model, ort_session  # noqa: E402

# (C, H, W, kernel, activation): activation "" (no bias), "relu" or "clip" (bias + activation)
SHAPES: list[tuple[int, int, int, int, str]] = [
    (144, 56, 56, 3, ""),
    (144, 56, 56, 3, "clip"),
    (192, 28, 28, 3, ""),
    (192, 28, 28, 3, "relu"),
    (384, 14, 14, 3, ""),
    (384, 14, 14, 3, "clip"),
    (576, 14, 14, 3, "clip"),
    (960, 7, 7, 3, ""),
    (960, 7, 7, 3, "clip"),
    (672, 14, 14, 5, ""),
    (672, 14, 14, 5, "relu"),
    (1152, 7, 7, 5, "clip"),
    (768, 7, 7, 7, ""),
    (768, 14, 14, 7, "relu"),
]


def depthwise_model(c: int, h: int, w: int, k: int, act: str) -> onnx.ModelProto:
    rng = np.random.default_rng(c * 1000 + h * 10 + k)
    pad = k // 2
    inits = [
        helper.make_tensor(
            "w",
            TensorProto.FLOAT,
            [c, 1, k, k],
            rng.standard_normal((c, 1, k, k)).astype(np.float32).ravel(),
        )
    ]
    ins = ["x", "w"]
    if act:
        inits.append(
            helper.make_tensor(
                "b", TensorProto.FLOAT, [c], rng.standard_normal(c).astype(np.float32)
            )
        )
        ins.append("b")
    conv_out = "y" if not act else "s"
    nodes = [
        helper.make_node("Conv", ins, [conv_out], group=c, kernel_shape=[k, k], pads=[pad] * 4)
    ]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    elif act == "clip":
        inits += [
            helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
        ]
        nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "dw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def bench(shape: tuple[int, int, int, int, str], threads: int, seconds: float) -> None:
    c, h, w, k, act = shape
    model = depthwise_model(c, h, w, k, act)
    x = np.random.default_rng(1).standard_normal((1, c, h, w)).astype(np.float32)
    feeds = {"x": x}
    ours = PyipuEngine(compile_model(model), feeds, threads)
    ort = OrtEngine(ort_session(model, threads), feeds)
    ours()
    ort()
    np.testing.assert_allclose(ours.result(), ort.result(), rtol=1e-4, atol=1e-4)
    times: dict[str, list[float]] = {"pyipu": [], "ort": []}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times["ort"]) < 20:
        for name, fn in (("pyipu", ours), ("ort", ort)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    a, b = statistics.median(times["pyipu"]), statistics.median(times["ort"])
    label = f"{c}x{h}x{w} k{k} {act or 'bare'}"
    print(f"{label:24s} pyipu {a * 1e3:8.4f} ms  ort {b * 1e3:8.4f} ms  ort/pyipu {b / a:5.2f}")
    ours.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=1.0, help="per shape")
    args = ap.parse_args()
    for shape in SHAPES:
        bench(shape, args.threads, args.seconds)


if __name__ == "__main__":
    main()
