"""Convolution layers and whole CNNs, pyipu vs ONNX Runtime in one process, interleaved.

    python -P benchmarks/conv_layers.py resnet50 shufflenet --threads 1 --layers

For each model (tests/light_models.py, random weights) prints the whole-model median latency of
pyipu's Runner and of an ORT InferenceSession (same thread count), their ratio (ORT time /
pyipu time: > 1 means pyipu is faster), and with --layers every distinct Conv of the model
compiled as a one-node model (min of --reps runs each side: per-layer times are short enough
that scheduler noise on a shared machine dominates the median). Not a pytest benchmark: it is a
diagnostic for docs/performance.md ("Convolution").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from light_models import load, with_random_weights  # noqa: E402

from pyipu import runtime  # noqa: E402
from pyipu.compiler import Compiler, CompilerOptions  # noqa: E402

PAUSE_S = 0.05


def _ort(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _dims(vi: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def _interleaved(a: Callable[[], object], b: Callable[[], object], reps: int) -> tuple[list, list]:
    # The pause lets the other side's pool stop spin-waiting (ORT's workers spin after a run,
    # which takes a core from whatever runs next on a 2-core machine).
    ta, tb = [], []
    for _ in range(reps):
        time.sleep(PAUSE_S)
        t = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t)
        time.sleep(PAUSE_S)
        t = time.perf_counter()
        b()
        tb.append(time.perf_counter() - t)
    return ta, tb


def run_model(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    threads: int,
    reps: int,
    stat: Callable[[list[float]], float],
) -> tuple[float, float]:
    """(pyipu ms, ORT ms) for one model; checks the outputs agree first."""
    opts = CompilerOptions()
    opts.engine_options = {"debug.allowOutOfMemory": "true"}  # VGG19, AlexNet: CPU use only
    exe = Compiler.compile(model, None, opts)
    sess = _ort(model, threads)
    names = [o.name for o in sess.get_outputs()]
    ref = sess.run(None, feeds)
    outs = {n: np.empty(r.shape, r.dtype) for n, r in zip(names, ref, strict=True)}
    with runtime.Runner(exe, runtime.RuntimeConfig(timeout_ns=0, num_threads=threads)) as r:
        r.execute(feeds, outs)
        for n, want in zip(names, ref, strict=True):
            np.testing.assert_allclose(outs[n], want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
        tp, to = _interleaved(lambda: r.execute(feeds, outs), lambda: sess.run(None, feeds), reps)
    return stat(tp) * 1e3, stat(to) * 1e3


def conv_layers(model: onnx.ModelProto) -> list[tuple[onnx.ModelProto, dict, int]]:
    """Each distinct Conv of the model as (one-node model, feeds, how many times it occurs)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    wanted = list(dict.fromkeys(n.input[0] for n in convs))
    probe.graph.output.extend(helper.make_empty_tensor_value_info(w) for w in wanted)
    x = next(i for i in model.graph.input if i.name not in inits)
    feed = {x.name: np.zeros(_dims(x), np.float32)}
    shapes = {w: a.shape for w, a in zip(wanted, _ort(probe, 1).run(None, feed), strict=True)}
    found: dict[tuple, list] = {}
    for n in convs:
        attrs = tuple(str(a) for a in n.attribute)
        key = (shapes[n.input[0]], inits[n.input[1]].shape, attrs, len(n.input))
        found.setdefault(key, [n, 0])[1] += 1
    rng = np.random.default_rng(0)
    out = []
    for (xs, _, _, nin), (n, count) in found.items():
        ins = ["x", "w"] + (["b"] if nin == 3 else [])
        cw = [numpy_helper.from_array(inits[n.input[i]], ins[i]) for i in range(1, nin)]
        node = helper.make_node("Conv", ins, ["y"])
        node.attribute.extend(n.attribute)
        g = helper.make_graph(
            [node],
            "conv",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(xs))],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
            cw,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        out.append((m, {"x": rng.standard_normal(xs).astype(np.float32)}, count))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--layers", action="store_true", help="also time every distinct Conv")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; threads {a.threads}")
    for name in a.models:
        model = with_random_weights(load(name))
        if a.layers:
            sp = so = 0.0
            for m, feeds, count in conv_layers(model):
                p, o = run_model(m, feeds, a.threads, a.reps, min)
                sp, so = sp + p * count, so + o * count
                conv = m.graph.node[0]
                attrs = {x.name: helper.get_attribute_value(x) for x in conv.attribute}
                print(
                    f"  x{list(feeds['x'].shape)} w{list(m.graph.initializer[0].dims)} "
                    f"s{list(attrs.get('strides', [1, 1]))} g{attrs.get('group', 1)} x{count}: "
                    f"pyipu {p:7.3f} ms  ort {o:7.3f} ms  ratio {o / p:5.2f}"
                )
            print(f"  sum of layers: pyipu {sp:.1f} ms  ort {so:.1f} ms  ratio {so / sp:.2f}")
        inits = {i.name for i in model.graph.initializer}
        x = next(i for i in model.graph.input if i.name not in inits)
        feeds = {x.name: np.random.default_rng(1).standard_normal(_dims(x)).astype(np.float32)}
        p, o = run_model(model, feeds, a.threads, a.reps, statistics.median)
        print(f"{name:14s} pyipu {p:8.2f} ms  ort {o:8.2f} ms  ratio {o / p:5.2f}", flush=True)


if __name__ == "__main__":
    main()
