"""`%%ipu fuse`: the cell is PopRT's model-fusion YAML (`pyipu --config_yaml`'s format).

    %%ipu fuse -o fused.popef
    precision: fp32
    model_fusion:
      - input_model: model0.onnx        # a path, or the name of a ModelProto variable
      - input_model: model1
        precision: fp16

Global keys that are per-model options (precision, input_shape, ...) are defaults for every
entry; `batches_per_step`, `num_io_tiles` and `ipu_version` apply when the magic's line leaves
them at their defaults; the CLI's file-output keys (output_dir, export_popef, ...) are accepted
and ignored: `-o FILE` writes the PopEF.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

from . import html as H
from .compile import compile_with_progress

_LINE_DEFAULTS = {"batches_per_step": 1, "num_io_tiles": 0, "ipu_version": "ipu2"}


@dataclass
class FuseResult:
    """The fused executable, its ONNX model, and which anchors belong to which subgraph."""

    executable: Any
    model: Any = field(repr=False)
    subgraphs: list[dict[str, Any]]  # {"index", "model", "inputs", "outputs"}

    def _repr_html_(self) -> str:
        rows = [
            (s["index"], s["model"], ", ".join(s["inputs"]), ", ".join(s["outputs"]))
            for s in self.subgraphs
        ]
        return (
            '<div class="ipu-fuse"><b>Fused executable</b> (input <code>index</code> selects '
            "the subgraph; the Runner fills it in from the anchors a request gives)"
            + H.table(("subgraph", "model", "inputs", "outputs"), rows, "ipu-subgraphs")
            + "</div>"
        )


def _config(cell: str) -> dict[str, Any]:
    import yaml

    from pyipu import _yaml
    from pyipu.cli.main import _yaml_keys
    from pyipu.errors import ConfigError

    try:
        data = _yaml.loads(cell, "the %%ipu fuse cell") or {}
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except yaml.YAMLError as e:
        raise UsageError(f"the %%ipu fuse cell is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise UsageError("the %%ipu fuse cell must be a mapping with a model_fusion: list")
    unknown = set(data) - _yaml_keys()
    if unknown:
        raise UsageError(f"the %%ipu fuse cell has unknown keys {sorted(unknown)}")
    entries = data.get("model_fusion")
    valid = isinstance(entries, list) and all(isinstance(e, dict) for e in entries)
    if not entries or not valid:
        raise UsageError("model_fusion: must be a non-empty list of per-model option mappings")
    return data


def _models(data: dict[str, Any], scope: Mapping[str, Any]) -> tuple[list[Any], list[str]]:
    """The converted models of the model_fusion entries, and their labels."""
    from pyipu.cli.main import _PER_MODEL, make_converter

    from .sources import model as lookup_model

    defaults = {k: data[k] for k in _PER_MODEL if k in data and k not in ("input_model",)}
    models, labels = [], []
    for i, entry in enumerate(data["model_fusion"]):
        if "input_model" not in entry or set(entry) - set(_PER_MODEL):
            raise UsageError(
                f"model_fusion entry {i} needs input_model and may set only {list(_PER_MODEL)}"
            )
        token = str(entry["input_model"])
        models.append(make_converter({**defaults, **entry}).convert(lookup_model(token, scope)))
        labels.append(token)
    return models, labels


def fuse(
    cell: str | None,
    args: argparse.Namespace,
    scope: Mapping[str, Any],
    show: Callable[..., Any] | None,
) -> FuseResult:
    from pyipu.compiler import fuse_models
    from pyipu.compiler.model_fusion import read_fusion_info

    if cell is None or not cell.strip():
        raise UsageError("%%ipu fuse needs a cell: the model-fusion YAML (see %ipu fuse -h)")
    data = _config(cell)
    for key, default in _LINE_DEFAULTS.items():
        if key in data and getattr(args, key) == default:
            setattr(args, key, data[key])
    models, labels = _models(data, scope)
    fused = fuse_models(models)
    info = read_fusion_info(fused)
    assert info is not None  # fuse_models always records it
    subgraphs = [
        {"index": i, "model": labels[i], "inputs": list(s.inputs), "outputs": list(s.outputs)}
        for i, s in enumerate(info.subgraphs)
    ]
    table = FuseResult(None, fused, subgraphs)._repr_html_()
    title = f"%%ipu fuse: {len(models)} models"
    exe = compile_with_progress(fused, None, args, title, show, lambda exe: table)
    return FuseResult(exe, fused, subgraphs)
