"""The architecture zoo (benchmarks/arch_zoo): every builder's module exports with torch's
legacy exporter to a model that onnx.checker accepts, and pyipu compiles it and matches ONNX
Runtime to 1e-3 (max |Δ| / max |ORT| over all outputs). The detectors' outputs have a
data-dependent leading dim (NonZero, NonMaxSuppression): pyipu pads them to a static capacity
and gives the extent as `<name>:count`; their valid rows are compared, and detections whose
scores tie (equal to 1e-5) are compared as a set, since an order among equal scores is
arbitrary. Their post-processing is also checked exactly: ORT's NonMaxSuppression on the very
boxes and scores pyipu computed selects what pyipu selected. The dynamo exporter needs
onnxscript (the bench extra), not installed here: the benchmark (benchmarks/zoo_side_by_side.py)
exercises it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
import onnx  # noqa: E402

from pyipu.compiler import Compiler  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "benchmarks")]
from arch_zoo import DETECTORS, HEAVY, NAMES, build  # noqa: E402
from arch_zoo.export import export  # noqa: E402
from detections import detection_error  # noqa: E402
from side_by_side import (  # noqa: E402
    PyipuEngine,
    compile_model,
    ort_session,
    relative_error,
    valid_outputs,
)
from zoo_side_by_side import feeds_of  # noqa: E402

TOLERANCE = 1e-3
# SSDLite's scores hold near-ties: overlapping neighbouring anchors over a nearly uniform map
# score a few float32 ulps apart in float64 arithmetic, and each float32 engine's rounding ties
# or inverts some of them (test_ssdlite_ties_are_float32_rounding). NMS visits candidates by
# score, so one inversion changes which box survives and what it suppresses next: 155 detections
# here, ORT's 154 (float64's 154 too, not all the same boxes as ORT's). Given the same boxes and
# scores, NMS selects exactly what ORT's does (test_detector_nms_matches_ort_on_pyipu_inputs).
NEAR_TIES = pytest.mark.xfail(
    strict=True, reason="float32 near-ties (distinct in float64) rounded apart from ORT's"
)
CASES = [
    pytest.param(
        n,
        marks=[
            *([pytest.mark.slow] if n in HEAVY else []),
            *([NEAR_TIES] if n == "ssdlite320_mobilenet_v3" else []),
        ],
    )  # fmt: skip
    for n in NAMES
]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("arch_zoo")


@pytest.mark.parametrize("name", CASES)
def test_zoo_model_exports_and_matches_ort(name, export_dir):
    path = export(name, "legacy", export_dir)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    feeds = feeds_of(name)
    assert {i.name for i in model.graph.input} == set(feeds)
    exe = compile_model(model)
    want = ort_session(model, 1).run(None, feeds)
    got = run_pyipu(exe, feeds)
    names = [o.name for o in model.graph.output]
    assert set(got) == set(names)
    if name in DETECTORS:
        assert_same_detections(dict(zip(names, want, strict=True)), got)
        return
    for n, w in zip(names, want, strict=True):
        assert np.isfinite(w).all(), n
        assert relative_error(got[n], w) <= TOLERANCE, n


def run_pyipu(
    exe: object, feeds: dict[str, np.ndarray], raw: bool = False
) -> dict[str, np.ndarray]:
    """pyipu's outputs, cut to their counts (`raw`: as the runner writes them, with counts)."""
    engine = PyipuEngine(exe, feeds, 1)
    try:
        engine()
        return engine.outputs if raw else valid_outputs(engine.outputs)
    finally:
        engine.close()


def assert_same_detections(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    """The same detections, paired among equal scores (benchmarks/detections.py)."""
    assert detection_error(want, got, TOLERANCE) <= TOLERANCE


def _detections(boxes: list[list[float]], scores: list[float]) -> dict[str, np.ndarray]:
    n = len(scores)
    return {
        "boxes": np.array(boxes, np.float32),
        "scores": np.array(scores, np.float32),
        "labels": np.full(n, 52, np.int64),
    }


def test_same_detections_pairs_tied_rows_in_any_order() -> None:
    """Detections of equal scores (to 1e-5) in the other order still pair: tied rows whose
    first coordinates differ by an ulp the other way round, and near-ties on either side of a
    score 1e-5 below the first. A box moved past the tolerance, another label, a score moved
    past 1e-5, a row missing, or rows of distinct scores swapped do not."""
    a, b, c = [4.881403, 121.5, 28.08, 166.9], [4.8814025, 185.5, 28.08, 230.9], [9, 9, 50, 50]
    ulp_apart = [[b[0], *a[1:]], [a[0], *b[1:]], c]  # x1 the other way round
    want = _detections([a, b, c], [0.5, 0.5, 0.25])
    assert_same_detections(want, _detections(ulp_apart[1::-1] + [c], [0.5, 0.5, 0.25]))
    x = [0.5 * (1 - e) for e in (0.0, 0.6e-5, 1.02e-5, 0.9e-5, 0.95e-5)]
    want = _detections([a, b, c], x[:3])
    assert_same_detections(want, _detections([a, c, b], [x[0], x[3], x[4]]))
    for bad in (
        _detections([a, [b[0], b[1] + 1, *b[2:]], c], x[:3]),
        dict(want, labels=np.array([52, 53, 52])),
        _detections([a, b, c], [x[0], x[1], 0.5 * (1 - 5e-5)]),
        _detections([a, b], x[:2]),
    ):
        with pytest.raises(AssertionError):
            assert_same_detections(want, bad)
    distinct = _detections([a, b, c], [0.5, 0.25, 0.125])
    for bad in (
        _detections([b, a, c], [0.5, 0.25, 0.125]),
        _detections([b, a, c], [0.25, 0.5, 0.125]),
    ):
        with pytest.raises(AssertionError):
            assert_same_detections(distinct, bad)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_nms_matches_ort_on_pyipu_inputs(name, export_dir):
    """Every NonMaxSuppression of the detector, given the boxes and scores pyipu computed
    (their valid rows), selects in ORT exactly what it selected in pyipu."""
    from onnx import helper

    model = onnx.load(str(export(name, "legacy", export_dir)))
    nms = [n for n in model.graph.node if n.op_type == "NonMaxSuppression"]
    probes = sorted({v for n in nms for v in [n.input[0], n.input[1], n.output[0]]})
    got = run_pyipu(Compiler.compile(model, probes), feeds_of(name), raw=True)
    consts = {c.output[0]: c for c in model.graph.node if c.op_type == "Constant"}
    for n in nms:
        count = {v: int(got[v + ":count"][0]) if v + ":count" in got else None for v in probes}
        boxes = got[n.input[0]][:, : count[n.input[0]]]  # [1, n, 4]: dim 1 data-dependent
        scores = got[n.input[1]][:, :, : count[n.input[1]]]  # [1, 1, n]
        graph = helper.make_graph(
            [consts[i] for i in n.input[2:] if i] + [n],
            "nms",
            [
                helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, boxes.shape),
                helper.make_tensor_value_info(n.input[1], onnx.TensorProto.FLOAT, scores.shape),
            ],
            [helper.make_tensor_value_info(n.output[0], onnx.TensorProto.INT64, None)],
        )
        one = helper.make_model(graph, opset_imports=model.opset_import, ir_version=8)
        (want,) = ort_session(one, 1).run(None, {n.input[0]: boxes, n.input[1]: scores})
        np.testing.assert_array_equal(got[n.output[0]][: count[n.output[0]]], want)


def test_ssdlite_ties_are_float32_rounding(export_dir):
    """SSDLite's candidates (above the 0.001 cut) include scores within a few float32 ulps of
    each other in float64 (torch, the same module), and those ORT computes exactly equal are
    distinct values there. pyipu's scores are as close to the float64 ones as ORT's, so matching
    ORT's ties would take ORT's own summation orders, not a more accurate kernel."""
    import torch

    name = "ssdlite320_mobilenet_v3"
    model = onnx.load(str(export(name, "legacy", export_dir)))
    (softmax,) = [n.output[0] for n in model.graph.node if n.op_type == "Softmax"]
    feeds = feeds_of(name)
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    probed.graph.output.append(onnx.ValueInfoProto(name=softmax))
    (ort_scores,) = ort_session(probed, 1).run([softmax], feeds)
    got = run_pyipu(Compiler.compile(model, [softmax]), feeds)[softmax]
    module, (x,) = build(name)
    with torch.no_grad():
        logits, _ = module.double().heads(x.double())
    exact = torch.softmax(logits, -1).numpy()  # [anchors, classes]
    near = 0
    for c in range(1, exact.shape[1]):  # class 0 is the background
        col = ort_scores[:, c]
        values, counts = np.unique(col[col > 0.001], return_counts=True)
        for v in values[counts > 1]:
            group = exact[col == v, c]
            assert len(np.unique(group)) == len(group), (c, v, group)
        ranked = np.sort(exact[col > 0.001, c])
        ulps = np.spacing(ranked[1:].astype(np.float32)).astype(np.float64)
        near += int((np.diff(ranked) < 4 * ulps).sum())
    assert near > 0  # candidates within 4 float32 ulps of each other in float64

    def error(s: np.ndarray) -> float:
        return float(np.abs(s.astype(np.float64) - exact).max() / exact.max())

    assert error(got) <= 2 * error(ort_scores), (error(got), error(ort_scores))


def test_dynamo_export_matches_ort(tmp_path):
    """torch's default exporter on one light model: the same check (needs the bench extra)."""
    pytest.importorskip("onnxscript")
    model = onnx.load(str(export("mobilenet_v3_small", "dynamo", tmp_path)))
    onnx.checker.check_model(model, full_check=True)
    feeds = feeds_of("mobilenet_v3_small")
    (want,) = ort_session(model, 1).run(None, feeds)
    engine = PyipuEngine(compile_model(model), feeds, 1)
    try:
        engine()
        assert relative_error(engine.result(), want) <= TOLERANCE
    finally:
        engine.close()


def test_side_by_side_harness_quick(tmp_path, monkeypatch, capsys):
    """benchmarks/zoo_side_by_side.py in quick mode on one light model: pyipu and ORT timed,
    pyipu checked, the table printed; OpenVINO too where the bench extra is installed (else
    its import error is reported, as any engine's failure). No timing is asserted."""
    import json

    from zoo_side_by_side import main

    monkeypatch.setenv("PYIPU_ZOO_CACHE", str(tmp_path))
    out = tmp_path / "zoo.json"
    args = ["--models", "mobilenet_v3_small", "--exporters", "legacy", "--quick"]
    assert main([*args, "--json", str(out)]) == 0
    (rec,) = json.loads(out.read_text())
    assert set(rec["times"]["1"]) >= {"pyipu", "ort"}
    assert rec["pyipu_error"] <= TOLERANCE
    assert "pyipu" not in rec["errors"]
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| mobilenet_v3")]
    assert len(row) == 1 and row[0].count("ms") >= 2
