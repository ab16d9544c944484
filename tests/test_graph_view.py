"""The compiled program mapped back to the ONNX graph: the compiler's record of which node made
each tensor (compiler/sources.py), what each node became (ipu_model/nodes.py), the IPU Model's
labels, and the `%ipu graph` drawing."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyipu.compiler import Compiler, Executable, sources
from pyipu.compiler.ipu_model.nodes import node_costs
from pyipu.errors import CorruptFileError


def _model() -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu (one fused instruction), Relu and Sigmoid concatenated
    in place, Shape (folded), Reshape (a view, twice), MatMul + Add (one GEMM), and a Shape
    output (a copy of a compile-time value into the output)."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn", epsilon=1e-5
        ),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["g"], name="sigmoid"),
        helper.make_node("Concat", ["r", "g"], ["cat"], name="concat", axis=1),
        helper.make_node("Shape", ["r"], ["shape"], name="shape"),
        helper.make_node("Shape", ["cat"], ["cs"], name="cat_shape"),
        helper.make_node("Reshape", ["cat", "cs"], ["cat2"], name="same_shape"),
        helper.make_node("Reshape", ["cat2", "flat"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "W2"], ["mm"], name="fc"),
        helper.make_node("Add", ["mm", "B2"], ["y"], name="bias"),
    ]
    g = helper.make_graph(
        nodes,
        "graph_view",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10)),
            helper.make_tensor_value_info("shape", TensorProto.INT64, (4,)),
        ],
        [
            init("W", 4, 3, 3, 3),
            init("s", 4),
            init("b", 4),
            init("m", 4),
            numpy_helper.from_array(np.ones(4, np.float32), "v"),
            numpy_helper.from_array(np.array([1, -1], np.int64), "flat"),
            init("W2", 8 * 8 * 8, 10),
            init("B2", 10),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def exe() -> Executable:
    return Compiler.compile(_model())


def _by_name(exe: Executable) -> dict[str, object]:
    nodes = node_costs(exe.program, exe.report())
    assert nodes is not None
    return {n.name: n for n in nodes}


def test_every_node_says_what_it_became(exe: Executable) -> None:
    n = _by_name(exe)
    assert n["conv"].role == sources.FUSED and n["conv"].done_by == "relu"
    assert n["bn"].role == sources.FUSED
    assert n["relu"].role == sources.COMPUTED and n["relu"].fused == ("conv", "bn")
    assert [c.opcode for c in n["relu"].instructions] == ["CONV2D"]
    assert n["concat"].role == sources.IN_PLACE  # Relu and Sigmoid write into its buffer
    assert n["flatten"].role == sources.VIEW and n["flatten"].shapes == ("float32[1, 512]",)
    assert n["cat_shape"].role == sources.FOLDED and not n["cat_shape"].instructions
    assert [c.opcode for c in n["shape"].instructions] == ["COPY"]
    assert n["fc"].role == sources.FUSED and n["fc"].done_by == "bias"  # MatMul + Add: a GEMM
    assert [c.opcode for c in n["bias"].instructions] == ["GEMM"]
    assert n["bias"].weight_bytes >= 512 * 10 * 4
    assert n["relu"].output_bytes == 4 * 8 * 8 * 4


def test_node_cycles_add_up_to_the_batch(exe: Executable) -> None:
    nodes = node_costs(exe.program, exe.report())
    assert nodes is not None
    assert sum(n.cycles for n in nodes) == exe.report().batch_cycles > 0


def test_cycle_labels_name_the_fused_onnx_nodes(exe: Executable) -> None:
    costs = {c.opcode: c for c in exe.report().instructions}
    assert costs["CONV2D"].node == "conv+bn+relu"
    assert costs["CONV2D"].op_type == "Conv+BatchNormalization+Relu"
    assert "(conv+bn+relu: Conv+BatchNormalization+Relu)" in exe.report().summary()


def test_a_saved_file_keeps_names_and_nodes(exe: Executable, tmp_path) -> None:
    exe.save(tmp_path / "m.popef")
    loaded = Executable(tmp_path / "m.popef")
    names = [t.name for t in loaded.program.tensors]
    assert names == [t.name for t in exe.program.tensors] and "r" in names
    before, after = _by_name(exe), _by_name(loaded)
    assert {k: (v.role, v.done_by, v.cycles) for k, v in after.items()} == {
        k: (v.role, v.done_by, v.cycles) for k, v in before.items()
    }


def _without_sources(exe: Executable) -> Executable:
    ir = exe.program
    opaque = tuple(o for o in ir.opaque if o[0] != sources.SOURCES_BLOB)
    return Executable.from_program(dataclasses.replace(ir, opaque=opaque))


def test_a_file_without_the_record_still_loads(exe: Executable) -> None:
    bare = Executable.from_bytes(_without_sources(exe).to_bytes())
    assert node_costs(bare.program, bare.report()) is None
    anchored = {a.tensor for a in bare.program.anchors}
    named = [t.name for i, t in enumerate(bare.program.tensors) if i not in anchored]
    assert named and named == [
        f"t{i}" for i in range(len(bare.program.tensors)) if i not in anchored
    ]
    assert all(c.node == "" for c in bare.report().instructions)


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"version": 2, "nodes": [], "tensors": []}',
        b'{"version": 1, "nodes": [], "tensors": []}',  # tensor count differs
        b'{"version": 1, "nodes": [["a", "Relu", [], []]], "tensors": [["t", 5, -1]]}',
        b'{"version": 1, "nodes": [["a", 3, [], []]], "tensors": [["t", 0, -1]]}',
        b'{"version": 1, "nodes": [], "tensors": [["t", true, -1]]}',
        b"[" * 100_000,
    ],
)
def test_a_malformed_record_is_a_corrupt_file(exe: Executable, payload: bytes) -> None:
    ir = exe.program
    opaque = tuple(
        (name, payload if name == sources.SOURCES_BLOB else blob) for name, blob in ir.opaque
    )
    image = Executable.from_program(dataclasses.replace(ir, opaque=opaque)).to_bytes()
    if payload.startswith(b'{"version": 1, "nodes": [["a", "Relu"'):
        # one tensor in the record: make the count match so the index check is what fails
        doc = json.loads(payload)
        doc["tensors"] = doc["tensors"] * len(ir.tensors)
        opaque = tuple(
            (n, json.dumps(doc).encode() if n == sources.SOURCES_BLOB else b) for n, b in ir.opaque
        )
        image = Executable.from_program(dataclasses.replace(ir, opaque=opaque)).to_bytes()
    with pytest.raises(CorruptFileError, match="pyipu.sources"):
        Executable.from_bytes(image).program  # noqa: B018


def test_graph_magic_draws_every_node(exe: Executable) -> None:
    pytest.importorskip("IPython")
    from magics_shell import magic, shell

    ip = shell()
    ip.user_ns["exe"] = exe
    g = magic(ip, "graph exe")
    runs = sum(1 for n in g.nodes if n.role == sources.COMPUTED)
    free = sum(1 for n in g.nodes if n.role in (sources.VIEW, sources.IN_PLACE))
    assert g.svg.count('class="ipu-graph-run"') == runs >= 4
    assert g.svg.count('class="ipu-graph-free"') == free == 3
    assert g.svg.count('class="ipu-graph-io"') == 3  # x; y and shape
    html = g._repr_html_()
    assert html.count("<tr>") == len(g.nodes) + 1  # a header and one row per node
    assert "fused into relu" in html and "folded at compile time" in html
    assert "relu Conv+BatchNormalization+Relu" in g.svg


def test_graph_magic_refuses_a_file_without_the_record(exe: Executable) -> None:
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError
    from magics_shell import magic, shell

    ip = shell()
    ip.user_ns["bare"] = _without_sources(exe)
    with pytest.raises(UsageError, match="no record of its ONNX graph"):
        magic(ip, "graph bare")
