"""PopTorch on pyipu against PyTorch eager, in one process, the same model and thread count.

    python -P benchmarks/poptorch_vs_torch.py --threads 1 2

Inference: `poptorch.inferenceModel(model)(x)` against `model(x)` under `torch.no_grad()`, for
MobileNetV2 (tests/poptorch_models.py, random weights) at batch 1 and 8 and an MLP at batch 64.
Training: one `poptorch.trainingModel` call (forward, pyipu's backward and the SGD step) against
zero_grad / forward / backward / step, for the MLP. The engines alternate round by round
(side_by_side.interleaved); the table shows median milliseconds per call and the ratio
torch / pyipu (> 1: pyipu is faster). Threads: PYIPU_NUM_THREADS when the wrapper compiles,
torch.set_num_threads before each torch round. A diagnostic, not a pytest benchmark.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]  # python -P adds none

import torch  # noqa: E402
from poptorch_models import mobilenet_v2  # noqa: E402
from side_by_side import interleaved  # noqa: E402

from pyipu import poptorch  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        out = self.net(x)
        if y is None:
            return out
        return out, torch.nn.functional.cross_entropy(out, y)


def inference_case(
    make: Callable[[], torch.nn.Module], x: torch.Tensor, threads: int
) -> tuple[Callable[[], None], Callable[[], None]]:
    torch.manual_seed(0)
    model = make().eval()
    os.environ["PYIPU_NUM_THREADS"] = str(threads)
    wrapped = poptorch.inferenceModel(model)
    wrapped(x)
    torch.testing.assert_close(wrapped(x), model(x).detach(), rtol=1e-3, atol=1e-4)

    def run_torch() -> None:
        torch.set_num_threads(threads)
        with torch.no_grad():
            model(x)

    return lambda: wrapped(x), run_torch


def training_case(threads: int) -> tuple[Callable[[], None], Callable[[], None]]:
    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    os.environ["PYIPU_NUM_THREADS"] = str(threads)
    wrapped = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    )
    wrapped(x, y)
    opt = torch.optim.SGD(ref.parameters(), lr=0.01, momentum=0.9)

    def step_torch() -> None:
        torch.set_num_threads(threads)
        opt.zero_grad()
        ref(x, y)[1].backward()
        opt.step()

    return lambda: wrapped(x, y), step_torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=3.0, help="budget per row")
    args = ap.parse_args()
    rows = []
    for t in args.threads:
        cases = {
            "mobilenet_v2 b1": lambda t=t: inference_case(
                mobilenet_v2, torch.randn(1, 3, 224, 224), t
            ),
            "mobilenet_v2 b8": lambda t=t: inference_case(
                mobilenet_v2, torch.randn(8, 3, 224, 224), t
            ),
            "mlp b64": lambda t=t: inference_case(MLP, torch.randn(64, 256), t),
            "mlp b64 train step": lambda t=t: training_case(t),
        }
        for name, make in cases.items():
            ours, theirs = make()
            a, b = interleaved(ours, theirs, args.seconds)
            rows.append((name, t, a * 1e3, b * 1e3, b / a))
            print(f"{name:20} threads {t}: pyipu {a * 1e3:8.3f} ms  torch {b * 1e3:8.3f} ms  "
                  f"torch/pyipu {b / a:5.2f}", flush=True)  # fmt: skip
    print("\n| model | threads | pyipu ms | torch ms | torch / pyipu |\n|---|---|---|---|---|")
    for name, t, a, b, r in rows:
        print(f"| {name} | {t} | {a:.3f} | {b:.3f} | {r:.2f} |")


if __name__ == "__main__":
    main()
