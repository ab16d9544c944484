"""The side-by-side benchmark's models: each an ONNX model plus its feeds.

The nine `light` CNNs get random weights (tests/light_models.py); the MLP and the BERT-base
encoder layer are built here with onnx.helper.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from light_models import NAMES as CNN_NAMES
from light_models import input_of, load, with_random_weights
from models import fusion_model0, fusion_model1, seed_overlap_io_model
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
OPSET = 17  # LayerNormalization is opset 17; ORT 1.32 runs it as one fused kernel


def _weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    fan_in = shape[0]
    return numpy_helper.from_array(
        (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name
    )


def _bias(rng: np.random.Generator, name: str, n: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(n) * 0.05).astype(np.float32), name)


def mlp_model(
    batch: int = 128, widths: tuple[int, ...] = (1024, 4096, 1024, 1000)
) -> onnx.ModelProto:
    """Gemm + bias + Relu layers (no Relu after the last): 2.4 GFLOP per inference at the
    defaults, 37 MB of weights."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i, (k, n) in enumerate(zip(widths, widths[1:], strict=False)):
        inits += [_weight(rng, f"w{i}", (k, n)), _bias(rng, f"b{i}", n)]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"]))
        x = f"h{i}"
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", F32, [batch, widths[0]])],
        [helper.make_tensor_value_info(x, F32, [batch, widths[-1]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def encoder_layer_model(
    seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072
) -> onnx.ModelProto:
    """One BERT-base encoder layer (post-LayerNorm, GELU as Erf), batch 1: self-attention over
    `seq` tokens, output projection, residual + LayerNorm, FFN, residual + LayerNorm.
    1.9 GFLOP per inference at the defaults."""
    rng = np.random.default_rng(0)
    d = hidden // heads
    inits = [
        _weight(rng, "wqkv", (hidden, 3 * hidden)),
        _bias(rng, "bqkv", 3 * hidden),
        _weight(rng, "wo", (hidden, hidden)),
        _bias(rng, "bo", hidden),
        _weight(rng, "w1", (hidden, ffn)),
        _bias(rng, "b1", ffn),
        _weight(rng, "w2", (ffn, hidden)),
        _bias(rng, "b2", hidden),
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln1_g"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "ln1_b"),
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln2_g"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "ln2_b"),
        numpy_helper.from_array(np.array([1, seq, 3, heads, d], np.int64), "qkv_shape"),
        numpy_helper.from_array(np.array([1, seq, hidden], np.int64), "out_shape"),
        numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "scale"),
        numpy_helper.from_array(np.array(1 / np.sqrt(2), np.float32), "rsqrt2"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wqkv"], ["qkv_mm"]),
        n("Add", ["qkv_mm", "bqkv"], ["qkv_b"]),
        n("Reshape", ["qkv_b", "qkv_shape"], ["qkv_r"]),  # [1, s, 3, h, d]
        n("Transpose", ["qkv_r"], ["qkv_t"], perm=[2, 0, 3, 1, 4]),  # [3, 1, h, s, d]
        n("Split", ["qkv_t"], ["q5", "k5", "v5"], axis=0),
        n("Squeeze", ["q5", "zero"], ["q"]),
        n("Squeeze", ["k5", "zero"], ["k"]),
        n("Squeeze", ["v5", "zero"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),  # [1, h, d, s]
        n("MatMul", ["q", "kt"], ["scores_raw"]),  # [1, h, s, s]
        n("Mul", ["scores_raw", "scale"], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "v"], ["ctx"]),  # [1, h, s, d]
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),  # [1, s, h, d]
        n("Reshape", ["ctx_t", "out_shape"], ["ctx_r"]),
        n("MatMul", ["ctx_r", "wo"], ["attn_mm"]),
        n("Add", ["attn_mm", "bo"], ["attn"]),
        n("Add", ["attn", "x"], ["res1"]),
        n("LayerNormalization", ["res1", "ln1_g", "ln1_b"], ["ln1"], axis=-1, epsilon=1e-12),
        n("MatMul", ["ln1", "w1"], ["ff1_mm"]),
        n("Add", ["ff1_mm", "b1"], ["ff1"]),
        n("Mul", ["ff1", "rsqrt2"], ["g0"]),  # GELU(x) = x/2 (1 + erf(x/sqrt 2))
        n("Erf", ["g0"], ["g1"]),
        n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["ff1", "half"], ["g3"]),
        n("Mul", ["g3", "g2"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["ff2_mm"]),
        n("Add", ["ff2_mm", "b2"], ["ff2"]),
        n("Add", ["ff2", "ln1"], ["res2"]),
        n("LayerNormalization", ["res2", "ln2_g", "ln2_b"], ["y"], axis=-1, epsilon=1e-12),
    ]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero"))
    graph = helper.make_graph(
        nodes,
        "bert_base_encoder_layer",
        [helper.make_tensor_value_info("x", F32, [1, seq, hidden])],
        [helper.make_tensor_value_info("y", F32, [1, seq, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _random_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(1)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _cnn(name: str) -> Callable[[], onnx.ModelProto]:
    return lambda: with_random_weights(load(name))


# name -> (builder, feeds). Insertion order is the order the tables list them.
MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], Callable]] = {
    "seed_overlap_io": (seed_overlap_io_model, _random_feeds),
    **{name: (_cnn(name), input_of) for name in CNN_NAMES},
    "mlp": (mlp_model, _random_feeds),
    "bert_encoder_layer": (encoder_layer_model, _random_feeds),
    "fusion_model0": (fusion_model0, _random_feeds),
    "fusion_model1": (fusion_model1, _random_feeds),
}
TINY = ("fusion_model0", "fusion_model1")


def model_and_feeds(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A benchmark model by name: one of MODELS, `sgemm_N` for C = A @ B (N × N), or
    `arch:NAME.EXPORTER` for an architecture-zoo model (benchmarks/arch_zoo) as that exporter
    (dynamo or legacy, the default) writes it; the zoo needs torch (the torch extra)."""
    if name.startswith("arch:"):
        from arch_zoo.export import export
        from zoo_side_by_side import feeds_of

        model, _, exporter = name[len("arch:") :].partition(".")
        return onnx.load(str(export(model, exporter or "legacy"))), feeds_of(model)
    if name.startswith("sgemm_"):
        from models import matmul_model

        n = int(name[len("sgemm_") :])
        rng = np.random.default_rng(0)
        return matmul_model(n), {k: rng.standard_normal((n, n)).astype(np.float32) for k in "AB"}
    build, feeds_of = MODELS[name]
    proto = build()
    return proto, feeds_of(proto)


def fp16_of(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model as `--precision fp16` converts it, and its float inputs as float16."""
    from pyipu.compiler.precision import convert_to_fp16

    half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    return convert_to_fp16(model), half
