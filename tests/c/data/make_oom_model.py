"""Regenerate cnn.popef, the second PopEF file tests/c/test_oom.c runs its loops over.

A small network whose executable exercises more of the loader than examples/data/add.popef:
weights in TENSOR_DATA, convolution and GEMM weights pre-packed at load, pooling, a gather and
a reduction. Input "image" float32[1, 3, 8, 8], "ids" int64[2]; outputs "probs" float32[1, 10],
"emb" float32[2, 4], "mean" float32[1, 4]. Run: python tests/c/data/make_oom_model.py
(the file only has to load: regenerate it when the PopEF format changes).
"""

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, CompilerOptions


def cnn_model():
    rng = np.random.default_rng(0)

    def init(name, shape, dtype=np.float32):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)

    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p1"], ["f1"]),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["g1"], transB=1),
        helper.make_node("Softmax", ["g1"], ["probs"], axis=1),
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("ReduceMean", ["p1"], ["mean"], axes=[2, 3], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "oom_cnn",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8)),
            helper.make_tensor_value_info("ids", TensorProto.INT64, (2,)),
        ],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, (1, 10)),
            helper.make_tensor_value_info("emb", TensorProto.FLOAT, (2, 4)),
            helper.make_tensor_value_info("mean", TensorProto.FLOAT, (1, 4)),
        ],
        [init("w1", (4, 3, 3, 3)), init("b1", (4,)), init("w2", (10, 64)), init("b2", (10,)),
         init("table", (5, 4))],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


if __name__ == "__main__":
    out = Path(__file__).with_name("cnn.popef")
    out.write_bytes(Compiler.compile(cnn_model(), None, CompilerOptions()).to_bytes())
    print(f"wrote {out} ({out.stat().st_size} bytes)")
