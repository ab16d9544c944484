"""Regenerate add.popef, the PopEF file examples/embed.c runs under `meson test`.

Z = X + Y with X, Y, Z float32 [2, 3]. Run: python examples/data/make_add.py
(tests/test_examples.py checks that the committed file equals what this produces).
"""

from pathlib import Path

from onnx import TensorProto, helper

from pyipu.compiler import Compiler, CompilerOptions


def add_model():
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "Y"], ["Z"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2, 3)) for n in "XY"],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, (2, 3))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def add_popef_bytes() -> bytes:
    return Compiler.compile(add_model(), None, CompilerOptions()).to_bytes()


if __name__ == "__main__":
    out = Path(__file__).with_name("add.popef")
    out.write_bytes(add_popef_bytes())
    print(f"wrote {out}")
