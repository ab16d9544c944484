"""Both Graphcore seed programs, ported by changing only `poprt` to `pyipu`, run end to end."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from helpers import subprocess_env, tool

from pyipu import runtime


def _load_example(repo, relpath: str):
    spec = importlib.util.spec_from_file_location(
        "example_" + relpath.replace("/", "_"), repo / "examples" / relpath
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_overlap_io_seed_runs_as_written(repo):
    result = subprocess.run(
        [sys.executable, str(repo / "examples/overlap_io/overlap_io.py")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Run PopEF with 3 threads." in result.stdout and "Complete." in result.stdout


@pytest.mark.slow
def test_overlap_io_seed_matches_onnxruntime(repo):
    seed = _load_example(repo, "overlap_io/overlap_io.py")
    model = seed.default_model()
    args = type("Args", (), {"batches_per_step": 16, "num_io_tiles": 192})()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = seed.compile(model, args)
    assert any("output" in str(w.message) for w in caught), "declared-shape warning expected"

    model.ir_version = 7  # onnxruntime rejects the IR version onnx 1.23 writes
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    config = runtime.RuntimeConfig()
    config.timeout_ns = 0
    with runtime.Runner(exe, config) as runner:
        (out_desc,) = runner.get_execute_outputs()
        assert out_desc.shape == [256, 256]  # the declared shape wins over [1,1,256,256]
        for i in range(3):
            x = np.random.default_rng(i).uniform(0, 1, (256, 256)).astype(np.float32)
            out = np.zeros((256, 256), np.float32)
            runner.execute({"input": x}, {"output": out})
            (expected,) = session.run(None, {"input": x})
            np.testing.assert_allclose(
                out, expected.reshape(256, 256), rtol=2e-4, atol=2e-4 * np.abs(expected).max()
            )


def test_model_fusion_seed(repo, tmp_path):
    work = tmp_path / "model_fusion"
    shutil.copytree(repo / "examples/model_fusion", work)
    env = subprocess_env()
    compiled = subprocess.run(
        [sys.executable, "compile.py"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert (work / "executable.popef").exists(), compiled.stdout + compiled.stderr
    assert (work / "model_fusion.onnx").exists()
    ran = subprocess.run(
        [sys.executable, "run.py"], cwd=work, capture_output=True, text=True, env=env, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr

    dump = subprocess.run(
        [tool("popef_dump"), "executable.popef"], cwd=work, capture_output=True, text=True, env=env
    )
    assert dump.returncode == 0, dump.stderr
    for text in (
        "graph0/X",
        "graph0/Y",
        "graph0/O",
        "graph1/X",
        "graph1/O",
        "index",
        "subgraph 0",
        "subgraph 1",
    ):
        assert text in dump.stdout

    # The fused model agrees with onnxruntime on each original model.
    with runtime.Runner(
        str(work / "executable.popef"),
        runtime.RuntimeConfig(validate_io_params=False, timeout_ns=0),
    ) as r:
        x = np.array([[0.25, -1.5]], np.float32)
        y = np.array([[2.0, 4.0]], np.float32)
        o = np.zeros(2, np.float32)
        r.execute({"graph0/X": x, "graph0/Y": y}, {"graph0/O": o})
        m0 = ort.InferenceSession(_ir7(work / "model0.onnx"), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(o, m0.run(None, {"X": x, "Y": y})[0])
        x1 = np.array([[0.5]], np.float16)
        o1 = np.zeros((1, 3), np.float16)
        r.execute({"graph1/X": x1}, {"graph1/O": o1})
        m1 = ort.InferenceSession(_ir7(work / "model1.onnx"), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(o1, m1.run(None, {"X": x1})[0])


def _ir7(path) -> bytes:
    import onnx

    model = onnx.load(str(path))
    model.ir_version = 7
    return model.SerializeToString()


def test_committed_train_popef_is_current(repo):
    """examples/train.c (run by meson test) trains with a committed PopEF made by pyipu.popart."""
    maker = _load_example(repo, "data/make_train.py")
    assert (repo / "examples/data/train.popef").read_bytes() == maker.train_popef_bytes(), (
        "regenerate with: python examples/data/make_train.py"
    )


def test_committed_add_popef_is_current(repo):
    """examples/embed.c (run by meson test) uses a committed PopEF; it must match the compiler."""
    maker = _load_example(repo, "data/make_add.py")
    assert (repo / "examples/data/add.popef").read_bytes() == maker.add_popef_bytes(), (
        "regenerate with: python examples/data/make_add.py"
    )
