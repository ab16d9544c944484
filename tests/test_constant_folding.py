"""Constant folding: every op the compiler lowers folds (or stays) without failing the compile.

For each op of the op registry, the ONNX backend suite's single-node models of that op that
pyipu runs are rebuilt with every input an initializer, so the whole graph is foldable; the
compiled model must give ONNX Runtime's result (the suite's expected outputs where ONNX Runtime
cannot run the model).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.loader import load_model_tests

import pyipu.backend
from pyipu.compiler import Compiler
from pyipu.compiler.folding import fold_node
from pyipu.compiler.onnx_import import import_model
from pyipu.compiler.ops import REGISTRY
from pyipu.reference.numpy_interp import run

sys.path.insert(0, str(Path(__file__).resolve().parent / "onnx_backend"))
import onnx_suite  # noqa: E402

CASES_PER_OP = 3


def _array(value: object) -> np.ndarray | None:
    """A suite value as an array (the suite stores some as TensorProtos or numpy scalars)."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    return None


def _cases_by_op() -> dict[str, list]:
    known = onnx_suite.load_known_failures()
    by_op: dict[str, list] = {}
    for tc in load_model_tests(kind="node"):
        model = tc.model
        if model is None or tc.name in known or not tc.data_sets:
            continue
        if onnx_suite.unsupported_reason(model, REGISTRY) is not None:
            continue
        ops = onnx_suite.model_ops(model)
        if len(model.graph.node) != 1 or len(ops) != 1 or ops[0][1] not in REGISTRY:
            continue
        inputs, outputs = tc.data_sets[0]
        if len(inputs) != len(model.graph.input):
            continue
        arrays = [_array(a) for a in [*inputs, *outputs]]
        if not all(a is not None and a.size for a in arrays):
            continue  # sequences, optionals and empty arrays are not IPU tensors
        n = len(inputs)
        by_op.setdefault(ops[0][1], []).append((tc, arrays[:n], arrays[n:]))
    return by_op


_BY_OP = _cases_by_op()
# A registry op without a usable single-node suite case (CastLike, If, Scan) is left out;
# test_most_registered_ops_have_cases bounds how many are.
_OPS = sorted(op for op in REGISTRY if op in _BY_OP)


def test_most_registered_ops_have_cases() -> None:
    missing = sorted(set(REGISTRY) - set(_BY_OP))
    assert len(missing) < len(REGISTRY) // 10, missing


def _constant_model(model: onnx.ModelProto, inputs: list[np.ndarray]) -> onnx.ModelProto:
    const = onnx.ModelProto()
    const.CopyFrom(model)
    g = const.graph
    g.initializer.extend(
        numpy_helper.from_array(np.asarray(a), vi.name)
        for vi, a in zip(g.input, inputs, strict=True)
    )
    del g.input[:]
    return const


def _expected(model: onnx.ModelProto, inputs: list[np.ndarray], outputs: list) -> list:
    feeds = {vi.name: a for vi, a in zip(model.graph.input, inputs, strict=True)}
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception:  # an op or opset ONNX Runtime does not implement
        return list(outputs)


@pytest.mark.parametrize("op", _OPS)
def test_op_on_constants_folds_and_matches_onnxruntime(op: str) -> None:
    for tc, inputs, outputs in _BY_OP[op][:CASES_PER_OP]:
        const = _constant_model(tc.model, inputs)
        got = pyipu.backend.prepare(const).run([])
        want = _expected(tc.model, inputs, outputs)
        for g, w in zip(got, want, strict=True):
            w = np.asarray(w)
            assert g.shape == w.shape, tc.name
            if w.dtype.kind in "fc":
                tol = max(tc.rtol, 2e-3 if w.dtype == np.float16 else 1e-4)
                np.testing.assert_allclose(g, w, rtol=tol, atol=max(tc.atol, tol), err_msg=tc.name)
            else:
                np.testing.assert_array_equal(g, w, err_msg=tc.name)


def _encoder_embeddings() -> onnx.ModelProto:
    """The embedding block of a BERT-style encoder as torch's exporter writes it: the position
    and token-type ids are buffers sliced with GatherElements (indices narrower than the data
    off the gather axis), gathered from constant tables and added to the word embeddings."""
    seq, hidden, max_pos = 8, 16, 64
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.arange(max_pos, dtype=np.int64)[None, :], "position_ids"),
        numpy_helper.from_array(np.zeros((1, max_pos), np.int64), "token_type_ids"),
        numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None, :], "idx"),
        numpy_helper.from_array(rng.standard_normal((max_pos, hidden), np.float32), "pos_table"),
        numpy_helper.from_array(rng.standard_normal((2, hidden), np.float32), "type_table"),
        numpy_helper.from_array(rng.standard_normal((100, hidden), np.float32), "word_table"),
        numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("GatherElements", ["position_ids", "idx"], ["pos"], "node_gather", axis=1),
        helper.make_node(
            "GatherElements", ["token_type_ids", "idx"], ["tt"], "node_gather_1", axis=1
        ),
        helper.make_node("Gather", ["pos_table", "pos"], ["pos_emb"], "node_embedding"),
        helper.make_node("Gather", ["type_table", "tt"], ["tt_emb"], "node_embedding_1"),
        helper.make_node("Gather", ["word_table", "input_ids"], ["word_emb"], "node_embedding_2"),
        helper.make_node("Add", ["word_emb", "tt_emb"], ["e1"], "node_add"),
        helper.make_node("Add", ["e1", "pos_emb"], ["e2"], "node_add_1"),
        helper.make_node(
            "LayerNormalization", ["e2", "gamma", "beta"], ["y"], "node_layer_norm", axis=-1
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "embeddings",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_encoder_embeddings_with_narrow_gather_elements_compile() -> None:
    model = _encoder_embeddings()
    graph = import_model(model)
    assert "node_gather" not in {n.name for n in graph.nodes}  # folded
    np.testing.assert_array_equal(graph.constants["pos"], np.arange(8)[None, :])
    ids = np.random.default_rng(1).integers(0, 100, (1, 8), dtype=np.int64)
    got = run(Compiler.compile(model).program, {"input_ids": ids})["y"]
    want = _expected(model, [ids], [])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_node_that_cannot_be_folded_stays_and_is_logged(caplog) -> None:  # noqa: ANN001
    # Indices out of range: the lowering rejects them (onnx.reference would wrap them around).
    node = helper.make_node("GatherElements", ["d", "i"], ["o"], "bad", axis=0)
    model = helper.make_model(
        helper.make_graph([node], "g", [], [helper.make_empty_tensor_value_info("o")]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    known = {"d": np.zeros(3, np.float32), "i": np.array([7], np.int64)}
    with caplog.at_level(logging.DEBUG, logger="pyipu.compiler"):
        assert fold_node(node, known, model, 13) is None
    assert "'bad'" in caplog.text and "not folded" in caplog.text


def test_constant_folding_pass_folds_narrow_gather_elements_and_keeps_what_it_cannot() -> None:
    from pyipu.passes import PassManager

    model = _encoder_embeddings()
    bad = helper.make_node("GatherElements", ["pos_table", "oob"], ["never"], "oob", axis=0)
    model.graph.node.append(bad)
    model.graph.initializer.append(numpy_helper.from_array(np.array([[99]], np.int64), "oob"))
    out = PassManager(["constant_folding"]).run(model)
    names = {n.name for n in out.graph.node}
    assert "node_gather" not in names and "node_gather_1" not in names  # folded
    assert "oob" in names  # out-of-range indices: left for the compiler to report
