"""ResNet50 (random weights): PopEF load time against ORT session creation, and peak RSS of a
process running it, pyipu against ONNX Runtime.

    pytest benchmarks/bench_footprint.py --benchmark-json=footprint.json

Load time: `Runner("resnet50.popef")` (open, verify, map the weights, start the workers) against
`InferenceSession("resnet50.onnx")` (parse, optimise the graph, pre-pack the weights), both at
1 thread, interleaved. Peak RSS: each runtime loads the model and runs 5 inferences in a fresh
child process, which prints its VmHWM (/proc/self/status) at the end. Not ru_maxrss: Linux
carries the parent's high-water mark over fork and exec into the child's ru_maxrss (here the
~900 MB of the pytest process). A child that only imports the runtime gives the baseline each
figure includes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from light_models import input_of, load, with_random_weights
from models import ORT_IR_VERSION
from side_by_side import compile_model, ort_session

from pyipu import runtime

PEAK = """
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]) * 1024)
"""
CHILD = {
    "pyipu": """
import sys, numpy as np
from pyipu import runtime
if sys.argv[1] == "run":
    r = runtime.Runner(sys.argv[2], runtime.RuntimeConfig(timeout_ns=0, num_threads=1))
    x = np.load(sys.argv[3])
    outs = {d.name: np.empty(d.shape, d.numpy_data_type()) for d in r.get_execute_outputs()}
    for _ in range(5):
        r.execute({r.get_execute_inputs()[0].name: x}, outs)
    r.close()
""",
    "ort": """
import sys, numpy as np
import onnxruntime as ort
if sys.argv[1] == "run":
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(sys.argv[2], so, providers=["CPUExecutionProvider"])
    x = np.load(sys.argv[3])
    for _ in range(5):
        s.run(None, {s.get_inputs()[0].name: x})
""",
}


@pytest.fixture(scope="module")
def resnet50_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("resnet50")
    model = with_random_weights(load("resnet50"))
    (x,) = input_of(model).values()
    compile_model(model).save(d / "resnet50.popef")
    model.ir_version = min(model.ir_version, ORT_IR_VERSION)
    onnx.save(model, d / "resnet50.onnx")
    np.save(d / "x.npy", x)
    return {
        "pyipu": str(d / "resnet50.popef"),
        "ort": str(d / "resnet50.onnx"),
        "x": str(d / "x.npy"),
    }


def _load(engine: str, files: dict[str, str]) -> None:
    if engine == "pyipu":
        runtime.Runner(files["pyipu"], runtime.RuntimeConfig(num_threads=1)).close()
    else:
        ort_session(files["ort"], 1)


@pytest.mark.parametrize("engine", ["pyipu", "ort"])
def test_resnet50_load(benchmark, resnet50_files, quick, engine):
    other = "ort" if engine == "pyipu" else "pyipu"
    benchmark.group = "resnet50_load"
    benchmark.extra_info.update(
        model="resnet50", engine=engine, file_bytes=os.path.getsize(resnet50_files[engine])
    )
    _load(engine, resnet50_files)  # warm the page cache
    benchmark.pedantic(
        _load,
        args=(engine, resnet50_files),
        setup=lambda: _load(other, resnet50_files),
        rounds=2 if quick else 7,
    )


def child_peak_rss(engine: str, mode: str, files: dict[str, str]) -> tuple[int, float]:
    """(peak RSS in bytes, wall seconds) of a child process running CHILD[engine]."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD[engine] + PEAK, mode, files[engine], files["x"]],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.split()[-1]), time.perf_counter() - t0


@pytest.mark.parametrize("engine", ["pyipu", "ort"])
def test_resnet50_peak_rss(benchmark, resnet50_files, engine):
    benchmark.group = "resnet50_peak_rss"
    base, _ = child_peak_rss(engine, "import", resnet50_files)
    peak: list[int] = []
    benchmark.pedantic(
        lambda: peak.append(child_peak_rss(engine, "run", resnet50_files)[0]), rounds=1
    )
    benchmark.extra_info.update(
        model="resnet50", engine=engine, peak_rss_bytes=peak[0], import_rss_bytes=base
    )
