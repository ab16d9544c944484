"""`pyipu`: PopRT's command line (`poprt --input_model ... --export_popef`), on the CPU.

Converts an ONNX model (input shapes, precision), writes the converted model, and with
--export_popef compiles it to `<output_dir>/executable.popef`. A `model_fusion:` list in
--config_yaml fuses several models into one executable whose `index` input selects the subgraph.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import onnx
import yaml

from pyipu.errors import Error

_YAML_KEYS = {
    "input_model",
    "output_dir",
    "output_model",
    "export_popef",
    "input_shape",
    "precision",
    "batches_per_step",
    "num_io_tiles",
    "ipu_version",
    "max_tensor_size",
    "model_fusion",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pyipu",
        description="Convert an ONNX model and compile it to a PopEF executable (PopRT's CLI).",
    )
    p.add_argument("--input_model", help="ONNX model to convert")
    p.add_argument("--output_dir", default="./", help="directory for outputs (default ./)")
    p.add_argument("--output_model", help="file name of the converted ONNX model")
    p.add_argument(
        "--export_popef",
        action="store_true",
        help="compile and write <output_dir>/executable.popef",
    )
    p.add_argument(
        "--input_shape",
        nargs="+",
        metavar="NAME=D0,D1,...",
        help="static shapes for inputs with dynamic dims, e.g. X=1,3,224,224",
    )
    p.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
    p.add_argument("--batches_per_step", type=int, default=1)
    p.add_argument(
        "--num_io_tiles",
        type=lambda v: v if v == "auto" else int(v),
        default=0,
        help='I/O tiles for overlap I/O (0: off; "auto": sized from the I/O bytes)',
    )
    p.add_argument("--ipu_version", choices=["ipu2", "ipu21"], default="ipu2")
    p.add_argument(
        "--max_tensor_size",
        type=int,
        default=-1,
        help="constant-folding cap in bytes (-1: unlimited); accepted for compatibility",
    )
    p.add_argument("--manual_sharding_config", help="shard.yaml: list of {node, device, stage}")
    p.add_argument(
        "--only_manual_sharding",
        action="store_true",
        help="with --manual_sharding_config: apply no other conversion (precision, shapes)",
    )
    p.add_argument("--config_yaml", help="YAML file with these options and/or model_fusion")
    return p


def parse_input_shapes(specs: list[str] | None) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise SystemExit(
                f"pyipu: bad --input_shape {spec!r}; expected NAME=D0,D1,..."
            ) from None
    return shapes


def convert(model: onnx.ModelProto, input_shape: dict[str, list[int]], precision: str):
    from pyipu.compiler.onnx_import import set_input_shapes
    from pyipu.compiler.precision import convert_to_fp16

    if input_shape:
        model = set_input_shapes(model, input_shape)
    if precision == "fp16":
        model = convert_to_fp16(model)
    return model


def _load_yaml(path: str) -> dict[str, Any]:
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise SystemExit(f"pyipu: {path}: expected a mapping of options")
    unknown = set(data) - _YAML_KEYS
    if unknown:
        raise SystemExit(f"pyipu: {path}: unknown keys {sorted(unknown)}")
    return data


def run(args: argparse.Namespace) -> int:
    from pyipu.compiler import Compiler, CompilerOptions
    from pyipu.compiler.fusion import fuse_models

    opts = vars(args).copy()
    base = Path.cwd()
    if args.config_yaml:
        config = _load_yaml(args.config_yaml)
        base = Path(args.config_yaml).resolve().parent
        opts.update({k: v for k, v in config.items() if k != "model_fusion"})
        fusion = config.get("model_fusion")
    else:
        fusion = None
    output_dir = (base / opts["output_dir"]).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)

    def load_converted(entry: dict[str, Any]) -> onnx.ModelProto:
        path = base / entry["input_model"]
        shapes = entry.get("input_shape")
        if isinstance(shapes, str):
            shapes = shapes.split()
        model = onnx.load(str(path))
        return convert(model, parse_input_shapes(shapes), entry.get("precision", "fp32"))

    if fusion:
        if not isinstance(fusion, list) or not all(isinstance(e, dict) for e in fusion):
            raise SystemExit("pyipu: model_fusion must be a list of per-model option mappings")
        models = [load_converted({"precision": opts["precision"], **entry}) for entry in fusion]
        model = fuse_models(models)
        default_name = "model_fusion.onnx"
    else:
        if not opts.get("input_model"):
            raise SystemExit(
                "pyipu: --input_model (or a config_yaml with model_fusion) is required"
            )
        sharding_only = opts.get("only_manual_sharding") and opts.get("manual_sharding_config")
        model = (
            onnx.load(str(base / opts["input_model"]))
            if sharding_only
            else load_converted(
                {
                    "input_model": opts["input_model"],
                    "input_shape": opts.get("input_shape"),
                    "precision": opts["precision"],
                }
            )
        )
        default_name = f"{Path(opts['input_model']).stem}.{opts['precision']}.onnx"

    shard_options: dict[str, Any] = {}
    if opts.get("manual_sharding_config"):
        from pyipu.compiler.sharding import shard_for_cli

        model, shard_options = shard_for_cli(model, opts["manual_sharding_config"])
    out_model = output_dir / (opts.get("output_model") or default_name)
    onnx.save(model, str(out_model))
    print(f"Converted model saved to {out_model}")
    if opts.get("export_popef"):
        options = CompilerOptions()
        options.batches_per_step = int(opts["batches_per_step"])
        options.num_io_tiles = opts["num_io_tiles"]
        options.ipu_version = opts["ipu_version"]
        for k, v in shard_options.items():
            setattr(options, k, v)
        popef = output_dir / "executable.popef"
        start = time.perf_counter()
        Compiler.compile_and_export(model, None, str(popef), options)
        print(f"PopEF saved to {popef} ({time.perf_counter() - start:.2f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (Error, ValueError, OSError) as e:
        print(f"pyipu: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
