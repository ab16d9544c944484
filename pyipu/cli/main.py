"""`pyipu`: PopRT's command line (`poprt --input_model ... --export_popef`), on the CPU.

Converts an ONNX model with `pyipu.Converter` (input shapes, batch size, opset, passes, precision),
writes the converted model, and with --export_popef compiles it to `<output_dir>/executable.popef`.
--check compares the converted model, and pyipu's run of its executable, with the original;
--show prints its I/O; --run compiles and runs it on random data. A `model_fusion:` list in
--config_yaml fuses several models into one executable whose `index` input selects the subgraph.
Exit codes: 0 success; 1 a check mismatch, NaN/inf outputs from --run where the original model's
are finite, or an error (one line, `pyipu: error: ...`); 2 usage and config-file errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import onnx
import yaml

from pyipu import _yaml
from pyipu.errors import ConfigError, Error

# Options a model_fusion entry may set for its own model (the others are global).
_PER_MODEL = (
    "input_model",
    "input_shape",
    "precision",
    "fp16_skip_op_types",
    "batch_size",
    "batch_axis",
    "convert_version",
    "max_tensor_size",
    "passes",
    "skip_passes",
    "remove_outputs",
    "checkpoints",
)


class CliError(Exception):
    """A usage error found after parsing (exit code 2, like argparse's)."""


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


_EXAMPLES = """examples:
  pyipu --input_model model.onnx --input_shape input=1,3,224,224 --export_popef
      convert with static shapes and write ./executable.popef
  pyipu -i model.onnx --precision fp16 --check --run
      convert to float16, compare pyipu's outputs with the original model's, time a run
  pyipu -i model.onnx --show
      print the converted model's inputs and outputs
  pyipu --config_yaml fusion.yaml --export_popef
      fuse the models a config's model_fusion list names into one executable
  pyipu --list_ops
      the ONNX ops and opset versions the compiler accepts
  pyipu serve models/ --http-port 8000 --grpc-port 8001
      serve a model repository over KServe v2 HTTP and gRPC (pyipu serve --help)
"""


def build_parser() -> argparse.ArgumentParser:
    from pyipu import __version__

    p = argparse.ArgumentParser(
        prog="pyipu",
        description="Convert an ONNX model and compile it to a PopEF executable (PopRT's CLI).",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"pyipu {__version__}")
    p.add_argument("-i", "--input_model", help="ONNX model to convert")
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
    p.add_argument("--batch_size", type=int, help="set dim batch_axis of every input to this")
    p.add_argument("--batch_axis", type=int, help="the batch dim for --batch_size (default 0)")
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "fp8", "fp8_weight"],
        default="fp32",
        help="fp32 (default) or fp16: float16 weights and activations, float32 accumulation"
        " (PopRT's fp8 and fp8_weight are refused: they need the IPU's FP8 quantizer)",
    )
    p.add_argument(
        "--fp16_skip_op_types", type=_csv, help="op types kept in fp32 with --precision fp16"
    )
    p.add_argument("--convert_version", type=int, default=11, help="ONNX opset (default 11)")
    p.add_argument(
        "--max_tensor_size",
        type=int,
        default=-1,
        help="constant folding does not create tensors larger than this many bytes (-1: no cap)",
    )
    p.add_argument("--passes", type=_csv, help="extra passes to run, comma separated")
    p.add_argument("--skip_passes", type=_csv, help="passes not to run, comma separated")
    p.add_argument("--list_all_passes", action="store_true", help="print the registered passes")
    p.add_argument(
        "--list_ops",
        action="store_true",
        help="print the ONNX ops the compiler accepts, with their opset versions",
    )
    p.add_argument(
        "--custom_pass_config", help="a Python file whose @pyipu.passes.register passes to load"
    )
    p.add_argument("--remove_outputs", type=_csv, help="graph outputs to remove")
    p.add_argument("--checkpoints", type=_csv, help="intermediate values to add as outputs")
    p.add_argument(
        "--check",
        action="store_true",
        help="compare the converted model's and pyipu's outputs with the original's",
    )
    p.add_argument("--show", action="store_true", help="print the converted model's I/O")
    p.add_argument("--run", action="store_true", help="compile and run on random data")
    p.add_argument(
        "--batches_per_step",
        type=int,
        default=1,
        help="batches one run of the executable processes (its inputs gain this many rows)",
    )
    p.add_argument(
        "--num_io_tiles",
        type=lambda v: v if v == "auto" else int(v),
        default=0,
        help='I/O tiles for overlap I/O (0: off; "auto": sized from the I/O bytes)',
    )
    p.add_argument(
        "--ipu_version",
        choices=["ipu2", "ipu21"],
        default="ipu2",
        help="the IPU the IPU Model sizes memory and cycles for (default ipu2)",
    )
    p.add_argument("--manual_sharding_config", help="shard.yaml: list of {node, device, stage}")
    p.add_argument(
        "--only_manual_sharding",
        action="store_true",
        help="with --manual_sharding_config: apply no other conversion (precision, shapes)",
    )
    p.add_argument("--config_yaml", help="YAML file with these options and/or model_fusion")
    return p


def _yaml_keys() -> set[str]:
    return {a.dest for a in build_parser()._actions if a.dest != "help"} | {"model_fusion"}


def _load_yaml(path: str) -> dict[str, Any]:
    try:
        data = _yaml.load(path, path) or {}
    except yaml.YAMLError as e:
        raise CliError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of options")
    unknown = set(data) - _yaml_keys()
    if unknown:
        raise CliError(f"{path}: unknown keys {sorted(unknown)}")
    return data


def _listify(v: Any) -> list[str] | None:
    if v is None:
        return None
    return _csv(v) if isinstance(v, str) else [str(x) for x in v]


def load_custom_passes(path: str) -> None:
    """Import a --custom_pass_config file so its @register passes join the registry."""
    spec = importlib.util.spec_from_file_location(f"pyipu_custom_passes_{Path(path).stem}", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise CliError(f"--custom_pass_config {path!r} is not a readable Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Error:
        raise
    except Exception as e:
        raise CliError(f"--custom_pass_config {path}: {type(e).__name__}: {e}") from e


def make_converter(opts: dict[str, Any]):
    from pyipu.converter import Converter

    shapes = opts.get("input_shape")
    return Converter(
        input_shape=shapes.split() if isinstance(shapes, str) else shapes,
        convert_version=int(opts.get("convert_version", 11)),
        precision=opts.get("precision", "fp32"),
        fp16_skip_op_types=_listify(opts.get("fp16_skip_op_types")),
        max_tensor_size=int(opts.get("max_tensor_size", -1)),
        skip_passes=_listify(opts.get("skip_passes")),
        used_passes=_listify(opts.get("passes")) or [],
        batch_size=opts.get("batch_size"),
        batch_axis=opts.get("batch_axis"),
        remove_outputs=_listify(opts.get("remove_outputs")) or [],
        checkpoints=_listify(opts.get("checkpoints")),
    )


def _check(original: onnx.ModelProto, converted: onnx.ModelProto, label: str) -> bool:
    from pyipu.converter import compare_models

    result = compare_models(original, converted)
    verdict = "OK" if result.ok else "MISMATCH"
    for name, err in result.errors.items():
        print(f"[check] {label}{name}: max error {err:.3g} ({result.backend})")
    print(f"[check] {verdict}: max error {result.max_error:.3g}, tolerance {result.tolerance:g}")
    return result.ok


def run(args: argparse.Namespace) -> int:
    opts = vars(args).copy()
    base = Path.cwd()
    fusion = None
    config: dict[str, Any] = {}
    if args.config_yaml:
        config = _load_yaml(args.config_yaml)
        base = Path(args.config_yaml).resolve().parent
        opts.update({k: v for k, v in config.items() if k != "model_fusion"})
        fusion = config.get("model_fusion")
    if opts.get("custom_pass_config"):
        load_custom_passes(str(base / opts["custom_pass_config"]))
    if opts.get("list_ops"):
        from pyipu.compiler.op_support import format_supported_ops, supported_ops

        print(format_supported_ops(supported_ops()))
        return 0
    if opts.get("list_all_passes"):
        from pyipu.passes import get_registered_passes

        passes = sorted(get_registered_passes().items())
        width = max(len(name) for name, _ in passes) + 2
        for name, cls in passes:
            doc = (cls.__doc__ or "").strip().splitlines()
            print(f"{name:<{width}}{doc[0] if doc else ''}")
        return 0

    checks_ok = True
    converted_models: list[tuple[onnx.ModelProto, onnx.ModelProto, str]] = []

    def load_converted(entry: dict[str, Any], label: str) -> onnx.ModelProto:
        nonlocal checks_ok
        path = base / entry["input_model"]
        if not path.is_file():
            raise CliError(f"input model {str(path)!r} does not exist")
        try:
            original = onnx.load(str(path))
        except Exception as e:  # protobuf's DecodeError and friends
            raise CliError(f"{path} is not an ONNX model: {e}") from e
        converted = make_converter(entry).convert(original)
        converted_models.append((original, converted, label))
        if opts.get("check"):
            checks_ok &= _check(original, converted, label)
        return converted

    if fusion:
        if not isinstance(fusion, list) or not all(isinstance(e, dict) for e in fusion):
            raise CliError("model_fusion must be a list of per-model option mappings")
        from pyipu.converter import MFConverter

        models = []
        for i, entry in enumerate(fusion):
            if "input_model" not in entry or set(entry) - set(_PER_MODEL):
                raise CliError(
                    f"model_fusion entry {i} needs input_model and may set only {list(_PER_MODEL)}"
                )
            defaults = {k: opts[k] for k in _PER_MODEL if k in opts and k != "input_shape"}
            models.append(load_converted({**defaults, **entry}, f"graph{i}/"))
        model = MFConverter().convert(models)
        default_name = "model_fusion.onnx"
    else:
        if not opts.get("input_model"):
            raise CliError("--input_model (or a config_yaml with model_fusion) is required")
        if opts.get("only_manual_sharding") and opts.get("manual_sharding_config"):
            model = onnx.load(str(base / opts["input_model"]))
            converted_models.append((model, model, ""))
        else:
            model = load_converted(opts, "")
        default_name = f"{Path(opts['input_model']).stem}.{opts['precision']}.onnx"

    shard_options: dict[str, Any] = {}
    if opts.get("manual_sharding_config"):
        from pyipu.compiler.sharding import shard_for_cli

        model, shard_options = shard_for_cli(model, base / opts["manual_sharding_config"])
    output_dir = (base / opts["output_dir"]).resolve()
    out_model = output_dir / (opts.get("output_model") or default_name)
    for key, path in (("output_dir", output_dir), ("output_model", out_model)):
        if key in config:
            _check_config_output(key, path.resolve(), base)
    output_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_model))
    print(f"Converted model saved to {out_model}")
    if opts.get("show"):
        from pyipu.cli.run_info import show

        print(show(model))
    if not (opts.get("export_popef") or opts.get("run") or opts.get("check")):
        return 0 if checks_ok else 1
    start = time.perf_counter()
    executable = _compile(model, opts, shard_options)
    if opts.get("export_popef"):
        popef = output_dir / "executable.popef"
        executable.save(popef)
        print(f"PopEF saved to {popef} ({time.perf_counter() - start:.2f} s)")
    if opts.get("check"):
        checks_ok &= _check_pyipu(executable, converted_models, bool(fusion), opts)
    if opts.get("run"):
        if not checks_ok:
            print("[run] not run: the check failed")
            return 1
        from pyipu.cli.run_info import run_executable

        lines, run_ok = run_executable(
            executable, reference=_reference(converted_models, bool(fusion))
        )
        for line in lines:
            print(line)
        if not run_ok:
            return 1
    return 0 if checks_ok else 1


def _check_config_output(key: str, path: Path, config_dir: Path) -> None:
    """A config file may only write under the working directory or its own directory: a
    downloaded config must not reach ~/.ssh through `..` (the command line may)."""
    roots = (Path.cwd().resolve(), config_dir.resolve())
    if not any(path == r or path.is_relative_to(r) for r in roots):
        raise ConfigError(
            f"{key} {str(path)!r} from the config file is outside the working directory and the"
            f" config's directory; give it on the command line to write there"
        )


def _compile_options(opts: dict[str, Any], extra: dict[str, Any]) -> Any:
    from pyipu.compiler import CompilerOptions

    options = CompilerOptions.from_dict(extra)
    options.batches_per_step = int(opts["batches_per_step"])
    options.num_io_tiles = opts["num_io_tiles"]
    options.ipu_version = opts["ipu_version"]
    return options


def _compile(model: onnx.ModelProto, opts: dict[str, Any], extra: dict[str, Any]) -> Any:
    from pyipu.compiler import Compiler

    return Compiler.compile(model, None, _compile_options(opts, extra))


def _check_pyipu(
    executable: Any,
    converted_models: list[tuple[onnx.ModelProto, onnx.ModelProto, str]],
    fused: bool,
    opts: dict[str, Any],
) -> bool:
    """--check of what pyipu computes: its run of the executable against the original model
    under onnxruntime (or onnx's reference), on the random data compare_models uses. A fused
    executable is checked model by model, each compiled on its own."""
    from pyipu.compiler import Compiler
    from pyipu.converter.check import compare_executable

    ok = True
    for original, converted, label in converted_models:
        exe = Compiler.compile(converted, None, _compile_options(opts, {})) if fused else executable
        result = compare_executable(exe, original, converted)
        for name, err in result.errors.items():
            print(f"[check] pyipu {label}{name}: max error {err:.3g} (vs {result.backend})")
        verdict = "OK" if result.ok else "MISMATCH"
        print(
            f"[check] pyipu {label}{verdict}: max error {result.max_error:.3g},"
            f" tolerance {result.tolerance:g}"
        )
        ok &= result.ok
    return ok


def _reference(
    converted_models: list[tuple[onnx.ModelProto, onnx.ModelProto, str]], fused: bool
) -> Any:
    """--run's reference: the original model's outputs on the same feeds (for subgraph i of a
    fused model, model i's, its names prefixed `graph<i>/`), or None when it cannot run them
    (then NaN/inf in pyipu's outputs are a failure)."""
    from pyipu.converter.check import reference_outputs

    def reference(subgraph: int | None, feeds: dict[str, Any]) -> Any:
        index = (subgraph or 0) if fused else 0
        if index >= len(converted_models):
            return None
        prefix = f"graph{index}/" if fused else ""
        try:
            want, backend = reference_outputs(
                converted_models[index][0], {k.removeprefix(prefix): v for k, v in feeds.items()}
            )
        except Exception:  # onnxruntime's own errors have no common base class
            return None
        return {prefix + k: v for k, v in want.items()}, backend

    return reference


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # the inference server: its own options (pyipu serve --help)
        from pyipu.serve.cli import main as serve_main

        try:
            return serve_main(argv[1:])
        except (Error, OSError) as e:
            print(f"pyipu serve: error: {e}", file=sys.stderr)
            return 1
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (CliError, ConfigError) as e:
        print(f"pyipu: error: {e}", file=sys.stderr)
        return 2
    except (Error, ValueError, OSError, TypeError, NotImplementedError) as e:
        print(f"pyipu: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # e.g. a bug in a --custom_pass_config pass: still one line
        print(f"pyipu: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
