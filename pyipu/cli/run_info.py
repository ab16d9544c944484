"""--show (model I/O) and --run (run the compiled model on random data) of the `pyipu` CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
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


# (subgraph or None, feeds) -> (expected outputs by name, backend name), or None if unknown
Reference = Callable[
    ["int | None", dict[str, np.ndarray]], "tuple[dict[str, np.ndarray], str] | None"
]


def _non_finite_failure(
    results: dict[str, np.ndarray],
    feeds: dict[str, np.ndarray],
    subgraph: int | None,
    reference: Reference | None,
) -> str | None:
    """Why these outputs are wrong: NaN/inf where the reference (the original model on the same
    feeds) has none, or there is no reference to say the values are expected. None if fine."""
    from pyipu.converter.check import output_error

    bad = [n for n, a in results.items() if a.dtype.kind in "fc" and not np.isfinite(a).all()]
    if not bad:
        return None
    ref = reference(subgraph, feeds) if reference is not None else None
    if ref is None:
        return f"non-finite values (NaN/inf) in {', '.join(bad)}"
    want, backend = ref
    wrong = [n for n in bad if n not in want or output_error(results[n], want[n]) == np.inf]
    if not wrong:
        return None
    return f"non-finite values (NaN/inf) in {', '.join(wrong)} where {backend} gives finite ones"


def run_executable(
    executable: Any, iterations: int = 10, seed: int = 0, reference: Reference | None = None
) -> tuple[list[str], bool]:
    """Run every subgraph `iterations` times on random data; PopRT-style summary lines, and
    whether every run succeeded.

    Latency is the mean wall time of one `execute` call (one batch); throughput is samples per
    second, the batch being dim 0 of the first input. A subgraph whose outputs hold NaN or inf
    gets a `[Failed]` line instead of `[Success]`, unless `reference(subgraph, feeds)` (the expected
    outputs by name and the backend's name) has the same non-finite values there.
    """
    from pyipu.runtime import Runner, RuntimeConfig

    rng = np.random.default_rng(seed)
    config = RuntimeConfig()
    if executable.program.num_subgraphs > 1:
        config.timeout_ns = 0
        config.validate_io_params = False
    lines, ok = [], True
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
            failure = _non_finite_failure(results, feeds, sub, reference)
            if failure is not None:
                lines.append(f"{tag}[Failed] Bs: {batch}: {failure}")
                ok = False
                continue
            lines.append(
                f"{tag}[Success] Bs: {batch}, Latency: {latency * 1e3:.3f} ms, "
                f"Tput: {batch / latency:.1f} samples/s"
            )
    return lines, ok
