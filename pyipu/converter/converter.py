"""PopRT's `Converter`: ONNX model → ONNX model ready for the IPU compiler.

Steps, in order: input shapes (`input_shape`, then `batch_size`/`batch_axis`), opset upgrade to
`convert_version`, the default passes (DEFAULT_PASSES), float_to_half when precision='fp16',
`used_passes`, `remove_outputs`/`checkpoints`; every pass named in `skip_passes` is left out.
With check=True the result is compared with the input on random data (see check.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import version_converter

from pyipu.compiler.errors import CompileError, ShapeError, UnsupportedError
from pyipu.compiler.onnx_import import ModelLike, load_model, set_input_shapes
from pyipu.converter.check import CheckResult, compare_models
from pyipu.passes import Pass, PassManager
from pyipu.passes.graph import (
    default_opset,
    is_big,
    light_copy,
    static_shape,
    value_types,
)

DEFAULT_PASSES = (
    "eliminate_identity",
    "eliminate_dropout",
    "const_input_shape",
    "constant_folding",
    "fuse_bn_into_conv",
    "fuse_activation",
    "int64_to_int32",
)
PRECISIONS = ("fp32", "fp16")

# PopRT keywords pyipu accepts and ignores: they tune PopART/Poplar code generation, not results.
_NO_EFFECT = {
    "disable_fast_norm": False,
    "serialize_matmul": None,
    "serialize_matmul_add": None,
    "remap_mode": None,
    "infer_shape_ahead": False,
    "merge_matmul": False,
    "merge_matmul_add": False,
    "merge_if_with_same_cond": False,
    "enable_compress_pattern": False,
    "fold_periodic_initializer": False,
    "enable_insert_remap": False,
    "fp8_skip_op_names": None,
    "fp8_params": "F143,F143,0,0",
    "logging_level": None,
}
# PopRT keywords that would change the model's results: refused unless left at their defaults.
_REFUSED = {
    "eightbitsio": False,
    "quantize": False,
    "enable_erf_gelu": False,
    "enable_avoid_overflow_patterns": False,
    "pack_args": None,
    "merge_moe": False,
    "custom_library_so_paths": None,
    "custom_shape_inference": None,
    "apply_hcsr": None,
}


def parse_input_shape(spec: Any) -> dict[str, list[int]]:
    """{'X': [1, 2]} from a mapping or from PopRT's ['X=1,2', ...] / 'X=1,2 Y=3' strings."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return {str(k): [int(d) for d in v] for k, v in spec.items()}
    if isinstance(spec, str):
        spec = spec.split()
    shapes: dict[str, list[int]] = {}
    for item in spec:
        name, sep, dims = str(item).rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise ShapeError(f"bad input_shape {item!r}; expected NAME=D0,D1,...") from None
    return shapes


class Converter:
    """poprt.Converter: `Converter(precision='fp16').convert(model) -> model`.

    Example:
        >>> conv = Converter(input_shape={"X": [1, 3]}, precision="fp16")  # doctest: +SKIP
        >>> fp16_model = conv.convert(onnx.load("model.onnx"))  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        input_shape: Mapping[str, Sequence[int]] | Sequence[str] | None = None,
        convert_version: int = 11,
        precision: str = "fp32",
        checkpoints: Sequence[str] | None = None,
        fp16_skip_op_types: Sequence[str] | str | None = None,
        skip_passes: Sequence[str] | str | None = None,
        used_passes: Sequence[str | Pass] = [],  # noqa: B006 - PopRT's signature
        check: bool = False,
        max_tensor_size: int = -1,
        batch_size: int | None = None,
        batch_axis: int | None = None,
        remove_outputs: Sequence[str] = [],  # noqa: B006 - PopRT's signature
        **popart_only: Any,
    ) -> None:
        if precision not in PRECISIONS:
            raise UnsupportedError(
                f"precision {precision!r} is not supported (pyipu has {list(PRECISIONS)}; "
                "fp8 and fp8_weight need the IPU's FP8 quantizer)"
            )
        _check_popart_only(popart_only)
        self.input_shape = parse_input_shape(input_shape)
        self.convert_version = int(convert_version)
        self.precision = precision
        self.checkpoints = _names(checkpoints)
        self.fp16_skip_op_types = _names(fp16_skip_op_types)
        self.skip_passes = set(_names(skip_passes))
        self.used_passes = list(used_passes or [])
        self.check = bool(check)
        self.max_tensor_size = int(max_tensor_size)
        self.batch_size = batch_size
        self.batch_axis = batch_axis
        self.remove_outputs = _names(remove_outputs)
        self.check_result: CheckResult | None = None
        if batch_axis is not None and batch_size is None:
            raise ShapeError("batch_axis needs batch_size")
        if batch_size is not None and int(batch_size) < 1:
            raise ShapeError(f"batch_size must be >= 1, got {batch_size}")

    def passes(self) -> list[Pass]:
        """The pass instances `convert` runs after the shape and opset steps, in order."""
        out: list[Pass] = []
        for name in DEFAULT_PASSES:
            if name not in self.skip_passes:
                args = (
                    {"max_tensor_size": self.max_tensor_size} if name == "constant_folding" else {}
                )
                out.append(Pass.get_pass(name, **args))
        if self.precision == "fp16" and "float_to_half" not in self.skip_passes:
            out.append(Pass.get_pass("float_to_half", skip_op_types=self.fp16_skip_op_types))
        for p in self.used_passes:
            if isinstance(p, Pass):
                if p.name not in self.skip_passes:
                    out.append(p)
            elif p not in self.skip_passes:
                out.append(Pass.get_pass(p))
        return out

    def convert(self, model: ModelLike) -> onnx.ModelProto:
        original = load_model(model)
        out = set_input_shapes(original, self.input_shape)  # a copy, even without shapes
        if self.batch_size is not None:
            _set_batch(out, int(self.batch_size), int(self.batch_axis or 0))
        out = _upgrade_opset(out, self.convert_version)
        out = PassManager(self.passes()).run_in_place(out)
        if self.input_shape or self.batch_size is not None:
            _static_output_shapes(out)
        _edit_outputs(out, self.remove_outputs, self.checkpoints)
        if self.check:
            self.check_result = compare_models(original, out)
            if not self.check_result.ok:
                raise CompileError(
                    f"converted model differs from the original: max error "
                    f"{self.check_result.max_error:.3g} > {self.check_result.tolerance:g} "
                    f"({self.check_result.errors})"
                )
        return out


def _names(v: Sequence[str] | str | None) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]


def _check_popart_only(kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - set(_NO_EFFECT) - set(_REFUSED))
    if unknown:
        raise TypeError(f"Converter() got unexpected keyword arguments {unknown}")
    refused = sorted(k for k, v in kwargs.items() if k in _REFUSED and v != _REFUSED[k] and v)
    if refused:
        raise UnsupportedError(
            f"Converter options {refused} are not implemented by pyipu (they would change the "
            "model's results); see docs/compatibility.md"
        )


def _set_batch(model: onnx.ModelProto, batch: int, axis: int) -> None:
    """Set dim `axis` of every runtime input to `batch` (fixed dims must already agree)."""
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if not -len(dims) <= axis < len(dims):
            raise ShapeError(f"batch_axis {axis} is out of range for input {vi.name!r}")
        d = dims[axis]
        if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != batch:
            raise ShapeError(
                f"batch_size {batch}: dim {axis} of input {vi.name!r} is fixed to {d.dim_value}"
            )
        d.Clear()
        d.dim_value = batch
    del model.graph.value_info[:]


def _static_output_shapes(model: onnx.ModelProto) -> None:
    """Declare the output shapes inference finds static now that the input shapes are."""
    types = value_types(model)
    for vi in model.graph.output:
        dims = static_shape(types[vi.name][1]) if vi.name in types else None
        t = vi.type.tensor_type
        if dims is None or not vi.type.HasField("tensor_type"):
            continue
        old = list(t.shape.dim) if t.HasField("shape") else []
        if old and len(old) != len(dims):
            continue
        if any(
            d.HasField("dim_value") and d.dim_value != n for d, n in zip(old, dims, strict=False)
        ):
            continue  # a declared shape that disagrees: left for the compiler to report
        t.shape.Clear()
        for n in dims:
            t.shape.dim.add().dim_value = n


def _upgrade_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """Upgrade the default-domain opset to `version`; newer models are left as they are."""
    current = default_opset(model)
    if current >= version:
        return model
    g = model.graph
    listed = {i.name for i in g.input}
    if model.ir_version < 4 and any(i.name not in listed for i in g.initializer):
        model.ir_version = 4  # IR 3 lists every initializer as an input; this model is IR 4 really
    try:  # on a copy without the weights (the converter serialises the whole model)
        conv = version_converter.convert_version(light_copy(model), version).graph
    except Exception as e:
        raise CompileError(f"converting opset {current} to convert_version {version}: {e}") from e
    big = {i.name for i in g.initializer if is_big(i)}
    for i in reversed(range(len(g.initializer))):
        if g.initializer[i].name not in big:
            del g.initializer[i]
    g.initializer.extend(conv.initializer)
    for field, new in (
        (g.node, conv.node),
        (g.output, conv.output),
        (g.value_info, conv.value_info),
    ):
        del field[:]
        field.extend(new)
    del g.input[:]
    g.input.extend(i for i in conv.input if i.name not in big or i.name in listed)
    others = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
    del model.opset_import[:]
    model.opset_import.extend([*others, onnx.helper.make_opsetid("", version)])
    return model


def _edit_outputs(model: onnx.ModelProto, remove: Sequence[str], add: Sequence[str]) -> None:
    outputs = {o.name for o in model.graph.output}
    missing = [n for n in remove if n not in outputs]
    if missing:
        raise CompileError(f"remove_outputs names {missing}, which are not graph outputs")
    keep = [o for o in model.graph.output if o.name not in set(remove)]
    types = value_types(model) if add else {}
    for name in add:
        if name in outputs:
            continue
        if name not in types:
            raise CompileError(f"checkpoint {name!r} is not a value of the graph with a known type")
        keep.append(onnx.helper.make_tensor_value_info(name, types[name][0], types[name][1]))
    del model.graph.output[:]
    model.graph.output.extend(keep)
