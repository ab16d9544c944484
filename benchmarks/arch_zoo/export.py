"""ONNX export of the zoo's models with both of torch's exporters, cached on disk.

`dynamo`: `torch.onnx.export(..., dynamo=True)` (torch.export + onnxscript; torch 2.13's
default). `legacy`: `dynamo=False`, the TorchScript tracer. Both at torch's default opset.
The detectors' NMS and RoiAlign become ONNX NonMaxSuppression and RoiAlign through
detection_ops' translations, as torchvision's ops export.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from pathlib import Path

import torch

from . import DETECTORS, build

EXPORTERS = ("dynamo", "legacy")


def cache_dir() -> Path:
    d = Path(os.environ.get("PYIPU_ZOO_CACHE", Path(tempfile.gettempdir()) / "pyipu-arch-zoo"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def output_names(name: str, n: int) -> list[str]:
    if name in DETECTORS:
        return ["boxes", "scores", "labels"]
    return [f"y{i}" for i in range(n)] if n > 1 else ["y"]


def input_names(name: str, n: int) -> list[str]:
    return ["input_ids", "attention_mask"][:n] if name.startswith(("bert", "gpt2")) else ["x"]


def export(name: str, exporter: str, directory: Path | None = None) -> Path:
    """The path of `name` exported by `exporter`, exporting it first if it is not cached.
    The ONNX file holds its weights (no external data)."""
    path = (directory or cache_dir()) / f"{name}.{exporter}.onnx"
    if path.exists():
        return path
    model, example = build(name)
    with torch.no_grad():
        n_out = len(out) if isinstance(out := model(*example), tuple) else 1
    names = dict(
        input_names=input_names(name, len(example)), output_names=output_names(name, n_out)
    )
    tmp = path.with_suffix(".tmp")
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            prog = torch.onnx.export(
                model,
                example,
                dynamo=True,
                custom_translation_table=_translations() if name in DETECTORS else None,
                **names,
            )
            prog.save(str(tmp), external_data=False)
        elif exporter == "legacy":
            if name in DETECTORS:
                from .detection_ops import register_legacy_symbolics

                register_legacy_symbolics(torch.onnx._constants.ONNX_DEFAULT_OPSET)
            torch.onnx.export(model, example, str(tmp), dynamo=False, **names)
        else:
            raise ValueError(f"exporter {exporter!r}: one of {EXPORTERS}")
    tmp.rename(path)
    return path


def _translations() -> dict:
    from .detection_ops import dynamo_translations

    return dynamo_translations()
