"""The architecture zoo (benchmarks/arch_zoo): every builder's module exports with torch's
legacy exporter to a model that onnx.checker accepts, and pyipu compiles it and matches ONNX
Runtime to 1e-3 (max |Δ| / max |ORT| over all outputs). The detectors carry NonZero and
NonMaxSuppression: pyipu either compiles and matches them too, or refuses them with a typed
pyipu.Error. The dynamo exporter needs onnxscript (the bench extra), not installed here: the
benchmark (benchmarks/zoo_side_by_side.py) exercises it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
import onnx  # noqa: E402

import pyipu  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "benchmarks")]
from arch_zoo import DETECTORS, HEAVY, NAMES  # noqa: E402
from arch_zoo.export import export  # noqa: E402
from side_by_side import PyipuEngine, compile_model, ort_session, relative_error  # noqa: E402
from zoo_side_by_side import feeds_of  # noqa: E402

TOLERANCE = 1e-3
CASES = [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in NAMES]


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
    try:
        exe = compile_model(model)
    except pyipu.errors.Error:
        if name in DETECTORS:
            return  # NonZero / NonMaxSuppression / RoiAlign not supported: a typed refusal
        raise
    want = ort_session(model, 1).run(None, feeds)
    engine = PyipuEngine(exe, feeds, 1)
    try:
        engine()
        got = engine.outputs
    finally:
        engine.close()
    names = [o.name for o in model.graph.output]
    assert set(got) == set(names)
    for n, w in zip(names, want, strict=True):
        assert np.isfinite(w).all(), n
        assert relative_error(got[n], w) <= TOLERANCE, n


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
