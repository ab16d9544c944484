"""PopTorch's helper ops (`poptorch.nop`, `dynamic_slice`, `ipu_print_tensor`, `custom_op`, ...).

Each is plain torch on the host, so a model using them runs eagerly as well as lowered. The ones
that only steer Poplar's memory planning (`set_available_memory`, `serializedMatMul`,
`MultiConv`) compute the same values, which is all pyipu's planner needs. `ipu_print_tensor`
makes its tensor an extra output of the executable that the executor prints after each call;
`custom_op` becomes an ONNX node of the op's domain and name, which compiles when pyipu knows the
op (an ONNX op) and otherwise fails with the compiler's UnsupportedOpError naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pyipu.poptorch import _lowering
from pyipu.poptorch.enums import MatMulSerializationMode, MultiConvPlanType
from pyipu.poptorch.errors import Error, UnsupportedFeatureError


def _error(message: str, location: str) -> Error:
    return Error(message, type="poptorch_python_error", location=location)


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself (PopTorch keeps a no-op in the graph for debugging)."""
    return tensor.clone()


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """The tensor itself; the proportion (0, 1] is checked and otherwise only steers Poplar."""
    if not 0.0 < available_memory_proportion <= 1.0:
        raise _error(
            f"set_available_memory: the proportion must be in (0, 1], got "
            f"{available_memory_proportion}",
            "set_available_memory",
        )
    return tensor


def serializedMatMul(  # noqa: N802
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    mode: MatMulSerializationMode,
    factor: int = 0,
    keep_precision: bool = False,
) -> torch.Tensor:
    """`lhs @ rhs`. PopTorch splits it into `factor` smaller products along the dimension
    `mode` names to save memory; the result is the same product."""
    del keep_precision  # products accumulate in float32 anyway
    if not isinstance(mode, MatMulSerializationMode):
        raise _error(f"serializedMatMul: mode must be a MatMulSerializationMode, got {mode!r}",
                     "serializedMatMul")  # fmt: skip
    if mode is not MatMulSerializationMode.Disabled:
        dim = {
            MatMulSerializationMode.InputChannels: lhs.shape[-2],
            MatMulSerializationMode.ReducingDim: lhs.shape[-1],
            MatMulSerializationMode.OutputChannels: rhs.shape[-1],
        }[mode]
        if factor < 1 or dim % factor:
            raise _error(
                f"serializedMatMul: factor {factor} must divide the {mode.name} dimension {dim}",
                "serializedMatMul",
            )
    return torch.matmul(lhs, rhs)


def _positions(tensor: torch.Tensor, dim: int, start: Any, size: int, step: int) -> torch.Tensor:
    """Indices start, start + step, ... (size of them) along `dim`, the start clamped so that
    every index is in range (PopTorch's dynamic ops never read or write out of bounds)."""
    extent = tensor.shape[dim]
    last = extent - (size - 1) * step - 1
    if size < 1 or step < 1 or last < 0:
        raise _error(
            f"a dynamic slice of {size} elements with step {step} does not fit dimension {dim} "
            f"of size {extent}",
            "dynamic_slice",
        )
    start = torch.as_tensor(start).reshape(()).to(torch.int64).clamp(0, last)
    return start + torch.arange(size, dtype=torch.int64) * step


def dynamic_slice(
    tensor: torch.Tensor, dim: int, start: torch.Tensor | int, size: int, step: int = 1
) -> torch.Tensor:
    """`size` elements of `tensor` along `dim` from the index `start` holds (a tensor whose value
    may change from call to call), every `step`-th."""
    return torch.index_select(tensor, dim, _positions(tensor, dim, start, size, step))


def dynamic_update(
    input: torch.Tensor,  # noqa: A002 (PopTorch's name)
    src: torch.Tensor,
    dim: int,
    start: torch.Tensor | int,
    size: int,
) -> torch.Tensor:
    """`input` with the `size` elements along `dim` from index `start` replaced by `src`."""
    if src.shape[dim] != size:
        raise _error(
            f"dynamic_update: src has {src.shape[dim]} elements along dimension {dim}, not {size}",
            "dynamic_update",
        )
    idx = _positions(input, dim, start, size, 1)
    shape = [1] * input.dim()
    shape[dim] = size
    return input.scatter(dim, idx.reshape(shape).expand(src.shape), src)


# --- ipu_print_tensor ------------------------------------------------------------------------
@dataclass(frozen=True)
class PrintFormat:
    """How a printed tensor is laid out (PopTorch's ipu_print_tensor arguments)."""

    title: str = ""
    summarise_threshold: int = 1000
    edge_items: int = 3
    max_line_width: int = 80
    digits: int = 8
    float_format: str = "auto"
    separator: str = " "
    open_bracket: str = "["
    close_bracket: str = "]"

    def render(self, value: np.ndarray) -> str:
        kind = {"auto": None, "fixed": False, "scientific": True}.get(self.float_format)
        text = np.array2string(
            value,
            max_line_width=self.max_line_width,
            precision=self.digits,
            suppress_small=None if kind is None else not kind,
            separator=self.separator,
            threshold=self.summarise_threshold,
            edgeitems=self.edge_items,
            floatmode="maxprec",
        )
        if (self.open_bracket, self.close_bracket) != ("[", "]"):
            text = text.replace("[", self.open_bracket).replace("]", self.close_bracket)
        return f"{self.title}: {text}" if self.title else text


def ipu_print_tensor(
    tensor: torch.Tensor,
    title: str = "",
    print_gradient: bool = True,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 80,
    digits: int = 8,
    float_format: str = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
) -> torch.Tensor:
    """Print `tensor` each time the model runs (use the returned tensor, as in PopTorch).

    Lowered, the tensor becomes an extra output the executor prints after every call, one line
    block per batch the call ran; run eagerly on the host, it prints at once. Gradients are not
    printed (`print_gradient` is accepted)."""
    del print_gradient
    if float_format not in ("auto", "fixed", "scientific"):
        raise _error(
            f"ipu_print_tensor: float_format must be 'auto', 'fixed' or 'scientific', got "
            f"{float_format!r}",
            "ipu_print_tensor",
        )
    fmt = PrintFormat(
        title,
        summarise_threshold,
        edge_items,
        max_line_width,
        digits,
        float_format,
        separator,
        open_bracket,
        close_bracket,
    )
    out = tensor.clone()
    if _lowering.isRunningOnIpu():
        _lowering.trace_state.prints.append((out, fmt))
    else:
        print(fmt.render(tensor.detach().cpu().numpy()))
    return out


# --- custom_op -------------------------------------------------------------------------------
def _attribute_kwargs(attributes: dict[str, Any]) -> dict[str, Any]:
    """torch.onnx's typed attribute keywords (name_f, name_i, name_s and their lists)."""
    out = {}
    for name, value in attributes.items():
        many = isinstance(value, (list, tuple))
        items = list(value) if many else [value]
        kinds = {type(v) for v in items}
        if kinds == {str}:
            out[f"{name}_s"] = value
        elif kinds == {int}:
            out[f"{name}_i"] = value
        elif kinds and kinds <= {int, float}:
            out[f"{name}_f"] = [float(v) for v in items] if many else float(value)
        else:
            raise _error(
                f"custom_op: attribute {name!r} must be a float, int or str or a list of one of "
                f"them, got {value!r}",
                "custom_op",
            )
    return out


@dataclass(frozen=True)
class _OpSpec:
    name: str
    domain: str
    attributes: dict[str, Any]
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]  # (shape, dtype) of each

    def templates(self) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(shape, dtype=dtype) for shape, dtype in self.outputs)


class _CustomOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, k: int, *inputs: torch.Tensor) -> Any:
        return _lowering.trace_state.custom_ops[k].templates()

    @staticmethod
    def symbolic(g: Any, k: int, *inputs: Any) -> Any:
        spec = _lowering.trace_state.custom_ops[k]
        op = f"{spec.domain}::{spec.name}" if spec.domain else spec.name
        outs = g.op(op, *inputs, outputs=len(spec.outputs), **spec.attributes)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for value, template in zip(outs, spec.templates(), strict=True):
            value.setType(torch._C.TensorType.create_from_tensor(template))
        return tuple(outs)


def custom_op(
    inputs: Sequence[torch.Tensor],
    name: str,
    domain: str,
    domain_version: int,
    example_outputs: Sequence[torch.Tensor],
    attributes: dict[str, Any] | None = None,
) -> list[torch.Tensor]:
    """An op the model's ONNX graph calls as `domain::name` with `attributes`, its outputs shaped
    like `example_outputs`. PopTorch runs a PopART C++ op there; pyipu runs the op when its
    compiler implements `domain::name` (ONNX's own ops, domain "ai.onnx") and otherwise refuses
    the model when it compiles (UnsupportedOpError naming the op). On the host it cannot run."""
    if not _lowering.isRunningOnIpu():
        raise UnsupportedFeatureError(
            f"custom_op {domain}::{name} runs only in a model lowered for pyipu", "custom_op"
        )
    domain = "" if domain == "ai.onnx" else domain
    spec = _OpSpec(
        name,
        domain,
        _attribute_kwargs(dict(attributes or {})),
        # plain ints: the traced tensors' own sizes would be values of the trace
        tuple((tuple(int(d) for d in e.shape), e.dtype) for e in example_outputs),
    )
    if domain:
        _lowering.trace_state.domains[domain] = int(domain_version)
    traced = _lowering.trace_state.custom_ops
    traced.append(spec)  # the Function takes its index: torch.onnx passes non-tensors as is
    return list(_CustomOp.apply(len(traced) - 1, *inputs))


class MultiConv:
    """`with poptorch.MultiConv():` — Poplar plans the convolutions inside together; pyipu's
    convolutions are planned one by one and compute the same values. The options are checked
    and recorded."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}

    def _set(self, name: str, value: Any) -> MultiConv:
        self.options[name] = value
        return self

    def availableMemoryProportions(self, value: float | Sequence[float]) -> MultiConv:  # noqa: N802
        for v in value if isinstance(value, Sequence) else [value]:
            set_available_memory(torch.zeros(()), float(v))
        return self._set("available_memory_proportions", value)

    def partialsTypes(self, value: Any) -> MultiConv:  # noqa: N802
        return self._set("partials_types", value)

    def enableConvDithering(self, value: Any) -> MultiConv:  # noqa: N802
        return self._set("enable_conv_dithering", value)

    def planType(self, value: MultiConvPlanType) -> MultiConv:  # noqa: N802
        if not isinstance(value, MultiConvPlanType):
            raise _error(f"MultiConv.planType: a MultiConvPlanType, got {value!r}", "MultiConv")
        return self._set("plan_type", value)

    def perConvReservedTiles(self, value: int) -> MultiConv:  # noqa: N802
        return self._set("per_conv_reserved_tiles", int(value))

    def cycleBackOff(self, value: float) -> MultiConv:  # noqa: N802
        return self._set("cycle_back_off", float(value))

    def __enter__(self) -> MultiConv:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
