"""An idle runner uses no CPU: its workers poll briefly after work (longer while a program runs,
ipu__pool_hold) and then sleep. Measured in a child process, where no other library's threads
(OpenBLAS's spin after a BLAS call) are charged to the same clock."""

from __future__ import annotations

import subprocess
import sys

from helpers import subprocess_env

CHILD = r"""
import time
import numpy as np
from onnx import TensorProto, helper
from pyipu import runtime
from pyipu.compiler import Compiler, CompilerOptions

n = 256
f = TensorProto.FLOAT
g = helper.make_graph(
    [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
    "g",
    [helper.make_tensor_value_info("a", f, [n, n]), helper.make_tensor_value_info("b", f, [n, n])],
    [helper.make_tensor_value_info("y", f, [n, n])],
)
exe = Compiler.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), None,
                       CompilerOptions())
feeds = {"a": np.ones((n, n), np.float32), "b": np.ones((n, n), np.float32)}
out = {"y": np.empty((n, n), np.float32)}
with runtime.Runner(exe, runtime.RuntimeConfig(num_threads=2, timeout_ns=0)) as r:
    busy0 = time.process_time()
    for _ in range(50):
        r.execute(feeds, out)
    busy = time.process_time() - busy0
    assert out["y"][0, 0] == n
    time.sleep(0.05)
    t0, c0 = time.monotonic(), time.process_time()
    time.sleep(0.5)
    print(busy, time.process_time() - c0, time.monotonic() - t0)
"""


def test_idle_runner_uses_no_cpu() -> None:
    env = {**subprocess_env(), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-P", "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    busy, idle_cpu, idle_wall = map(float, done.stdout.split())
    assert busy > 0.0  # the clock counts this process's threads
    # a polling worker would use the whole 0.5 s; sleeping ones a few wake-ups at most
    assert idle_cpu < 0.02 * idle_wall, (idle_cpu, idle_wall)
