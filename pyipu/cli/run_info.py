"""--show (model I/O) and --run (run the compiled model on random data) of the `pyipu` CLI."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import onnx

from pyipu.passes.overview import overview


def show(model: onnx.ModelProto) -> str:
    """PopRT's --show: one line per graph input and output (name, dtype, shape)."""
    ov = overview(model)
    lines = [f"Input  {n}: {t} {s}" for n, t, s in ov.inputs]
    lines += [f"Output {n}: {t} {s}" for n, t, s in ov.outputs]
    return "\n".join(lines)


def _random(shape: list[int], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def run_executable(executable: Any, iterations: int = 10, seed: int = 0) -> list[str]:
    """Run every subgraph `iterations` times on random data; PopRT-style summary lines.

    Latency is the mean wall time of one `execute` call (one batch); throughput is samples per
    second, the batch being dim 0 of the first input.
    """
    from pyipu.runtime import Runner, RuntimeConfig

    rng = np.random.default_rng(seed)
    config = RuntimeConfig()
    if executable.program.num_subgraphs > 1:
        config.timeout_ns = 0
        config.validate_io_params = False
    lines = []
    with Runner(executable, config) as runner:
        ins, outs = runner.get_execute_inputs(), runner.get_execute_outputs()
        groups = sorted({d.subgraph for d in ins + outs}, key=lambda s: -1 if s is None else s)
        for sub in groups:
            feeds = {
                d.name: _random(list(d.shape), d.numpy_data_type(), rng)
                for d in ins
                if d.subgraph == sub
            }
            results = {
                d.name: np.zeros(d.shape, d.numpy_data_type()) for d in outs if d.subgraph == sub
            }
            runner.execute(feeds, results)  # warm-up
            start = time.perf_counter()
            for _ in range(iterations):
                runner.execute(feeds, results)
            latency = (time.perf_counter() - start) / iterations
            first = next(iter(feeds.values()), None)
            batch = int(first.shape[0]) if first is not None and first.ndim else 1
            tag = f"[subgraph {sub}] " if len(groups) > 1 else ""
            lines.append(
                f"{tag}[Success] Bs: {batch}, Latency: {latency * 1e3:.3f} ms, "
                f"Tput: {batch / latency:.1f} samples/s"
            )
    return lines
