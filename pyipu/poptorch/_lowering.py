"""A torch Module lowered to ONNX for pyipu: torch.onnx's TorchScript exporter runs `forward`
once on a micro-batch (so shapes, dtypes and control flow are fixed by the first call's inputs,
as in PopTorch), with the parameters and buffers kept as initializers under their own names.

`forward`'s arguments and results may be nested tuples, lists and dicts: their tensors become the
graph's inputs `input<k>` and outputs `output<k>`, and the rest of the structure is kept to
rebuild the results. `poptorch.identity_loss` becomes a `poptorch::IdentityLoss` node while
tracing, replaced here by the reduction it names; blocks become node placement (blocks.py).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch.utils import _pytree as pytree

from pyipu.compiler.variables import set_variables
from pyipu.poptorch import blocks
from pyipu.poptorch.errors import Error, InputShapeError, UnsupportedFeatureError

OPSET = 17
_REDUCTIONS = {"sum": 0, "mean": 1, "none": 2}
_running = False


@dataclass
class TraceState:
    """What the helper ops (ops.py) record while `forward` is traced."""

    prints: list[tuple[torch.Tensor, Any]] = field(default_factory=list)  # (tensor, PrintFormat)
    domains: dict[str, int] = field(default_factory=dict)  # custom_op domain → its version
    custom_ops: list[Any] = field(default_factory=list)  # custom_op's specs, by index


trace_state = TraceState()


def isRunningOnIpu() -> bool:  # noqa: N802
    """True while the model is being lowered for pyipu (its `forward` traced), else False."""
    return _running


class _IdentityLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, reduction: int) -> torch.Tensor:
        return _reduce(x, reduction)

    @staticmethod
    def symbolic(g: Any, x: Any, reduction: int) -> Any:
        return g.op("poptorch::IdentityLoss", x, reduction_i=reduction)


def _reduce(x: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == 0:
        return x.sum()
    if reduction == 1:
        return x.mean()
    return x.clone()


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark `x` as the loss: its reduction ("sum", "mean" or "none") is what training
    differentiates (with "none", a gradient of ones flows back through `x`)."""
    if reduction not in _REDUCTIONS:
        raise Error(
            f"identity_loss: reduction must be 'sum', 'mean' or 'none', got {reduction!r}",
            type="poptorch_python_error",
            location="identity_loss",
        )
    if _running:
        return _IdentityLoss.apply(x, _REDUCTIONS[reduction])
    return _reduce(x, _REDUCTIONS[reduction])


@dataclass
class InputSpec:
    name: str
    shape: tuple[int, ...]  # one micro-batch's
    dtype: torch.dtype


@dataclass
class Lowered:
    """The ONNX model of one micro-batch and how the executor feeds and reads it."""

    model: onnx.ModelProto
    inputs: list[InputSpec]
    in_spec: Any  # pytree spec of (args, kwargs); tensor leaves are the inputs in order
    in_leaves: list[Any]  # the non-tensor leaves (None for a tensor's place)
    outputs: list[str]  # ONNX names of the tensor outputs, in order
    out_spec: Any
    out_leaves: list[Any]  # non-tensor output leaves (None where a tensor goes)
    params: dict[str, str]  # initializer → the host model's parameter / buffer name
    buffers: dict[str, str] = field(default_factory=dict)  # initializer → its value after a call
    loss: str | None = None  # the loss the training graph differentiates
    loss_output: int | None = None  # its position among `outputs`
    placement: blocks.Placement = field(default_factory=lambda: blocks.Placement(0, 1, False))
    prints: list[tuple[str, Any]] = field(default_factory=list)  # (output, PrintFormat)


class _Flat(torch.nn.Module):
    """The user's model with flat tensor arguments and results, as the exporter wants."""

    def __init__(self, model: torch.nn.Module, in_spec: Any, in_leaves: list[Any]) -> None:
        super().__init__()
        self.model = model
        self.in_spec, self.in_leaves = in_spec, in_leaves
        self.out_spec: Any = None
        self.out_leaves: list[Any] = []
        self.buffers: list[torch.Tensor] = []  # returned after the outputs: their new values

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        global trace_state
        trace_state = TraceState()
        args, kwargs = rebuild(self.in_spec, self.in_leaves, tensors)
        out = self.model(*args, **kwargs)
        leaves, self.out_spec = pytree.tree_flatten(out)
        self.out_leaves = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        printed = [t for t, _ in trace_state.prints]
        return tuple(v for v in [*leaves, *self.buffers, *printed] if isinstance(v, torch.Tensor))


def rebuild(spec: Any, leaves: list[Any], tensors: Sequence[Any]) -> Any:
    if spec.is_leaf():  # a lone tensor
        return tensors[0] if leaves == [None] else leaves[0]
    it = iter(tensors)
    return pytree.tree_unflatten([next(it) if v is None else v for v in leaves], spec)


def flatten_inputs(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], Any, list[Any]]:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
    return tensors, spec, [None if isinstance(v, torch.Tensor) else v for v in leaves]


def micro_batches(tensors: Sequence[torch.Tensor], factor: int) -> list[torch.Tensor]:
    """Each input's first micro-batch: the batch dimension split into `factor` parts."""
    if factor == 1:
        return list(tensors)
    out = []
    for k, t in enumerate(tensors):
        if t.dim() == 0 or t.shape[0] % factor:
            raise InputShapeError(
                f"input {k}: batch dimension {list(t.shape)[:1]} is not a multiple of "
                f"{factor} (deviceIterations × replicationFactor × gradientAccumulation)"
            )
        out.append(t[: t.shape[0] // factor])
    return out


def lower(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    factor: int,
    train_mode: bool,
    strategy: Any,
    with_loss: bool = False,
) -> Lowered:
    """Trace `model` on the first micro-batch of `args`/`kwargs` into an ONNX model, its
    modules in training mode or not (`train_mode`); `with_loss` finds the training loss."""
    tensors, in_spec, in_leaves = flatten_inputs(args, kwargs)
    micro = micro_batches(tensors, factor)
    flat = _Flat(model, in_spec, in_leaves)
    names = [f"input{k}" for k in range(len(micro))]
    traced, data, changed = _export(model, flat, micro, names, train_mode)
    if changed and not with_loss:  # an inferenceModel's
        # buffers forward modifies in place (a counter): export again returning their new
        # values, which become variables of the executable (kept on the device between calls)
        flat.buffers = changed
        traced, data, _ = _export(model, flat, micro, names, train_mode)
    proto = onnx.load_from_string(data)
    _import_domains(proto, trace_state.domains)
    outputs = [o.name for o in proto.graph.output]
    n_printed = len(trace_state.prints)
    printed = outputs[len(outputs) - n_printed :] if n_printed else []
    outputs = outputs[: len(outputs) - n_printed]
    extra = outputs[len(outputs) - len(flat.buffers) :] if flat.buffers else []
    outputs = outputs[: len(outputs) - len(extra)]
    host = {n: n for n, _ in model.named_parameters()}
    host.update({n: n for n, _ in model.named_buffers()})
    params = {}
    for init in proto.graph.initializer:
        name = init.name[len("model.") :] if init.name.startswith("model.") else init.name
        if name in host:
            params[init.name] = name
    # the exporter read the buffers after tracing moved them: the values from before
    named = dict(model.named_buffers())
    for init in proto.graph.initializer:
        buf = named.get(params.get(init.name, ""))
        if buf is not None:
            init.CopyFrom(numpy_helper.from_array(buf.detach().cpu().numpy(), init.name))
    out = Lowered(
        proto,
        [InputSpec(n, tuple(t.shape), t.dtype) for n, t in zip(names, micro, strict=True)],
        in_spec,
        in_leaves,
        outputs,
        flat.out_spec,
        flat.out_leaves,
        params,
        prints=[(o, fmt) for o, (_, fmt) in zip(printed, trace_state.prints, strict=True)],
    )
    buffer_names = {id(b): n for n, b in model.named_buffers()}
    by_host = {name: init for init, name in params.items()}
    for b, value in zip(flat.buffers, extra, strict=True):
        init = by_host.get(buffer_names.get(id(b), ""))
        if init is not None:
            out.buffers[init] = value
    if out.buffers:
        set_variables(proto, out.buffers)
    _replace_identity_losses(out)
    if with_loss:
        _find_loss(out)
    out.placement = blocks.place(proto, traced, strategy)
    return out


def _export(
    model: torch.nn.Module,
    flat: _Flat,
    micro: list[torch.Tensor],
    names: list[str],
    train_mode: bool,
) -> tuple[list[blocks.BlockSpec], bytes, list[torch.Tensor]]:
    """One export: the blocks traced, the ONNX bytes, the buffers the trace modified (restored
    since, as are the modules' training flags)."""
    global _running
    modes = {m: m.training for m in model.modules()}  # the exporter resets them all
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    plain = [  # tensors kept as plain attributes: constants of the graph
        (t, t.detach().clone())
        for m in model.modules()
        for t in vars(m).values()
        if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter)
    ]
    f: Any = io.BytesIO()  # torch's annotation names paths only
    traced: list[blocks.BlockSpec] = []
    blocks._TRACED, _running = traced, True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                flat,
                tuple(micro),
                f,
                input_names=names,
                opset_version=OPSET,
                training=torch.onnx.TrainingMode.TRAINING
                if train_mode
                else torch.onnx.TrainingMode.EVAL,
                do_constant_folding=False,
                dynamo=False,
            )
    except Error:
        raise
    except Exception as e:  # the exporter's own errors: an op or construct it cannot export
        raise UnsupportedFeatureError(
            f"the model cannot be lowered by torch.onnx: {type(e).__name__}: {e}", "lower"
        ) from e
    finally:
        blocks._TRACED, _running = None, False
        for m, mode in modes.items():
            m.training = mode
        changed = [b for b, saved in buffers if not torch.equal(b, saved)]
        with torch.no_grad():
            for b, saved in [*buffers, *plain]:
                b.copy_(saved)
    return traced, f.getvalue(), changed


def _import_domains(model: onnx.ModelProto, domains: dict[str, int]) -> None:
    """The custom ops' domains at the versions `custom_op` named."""
    for imp in model.opset_import:
        if imp.domain in domains:
            imp.version = domains[imp.domain]
    known = {imp.domain for imp in model.opset_import}
    model.opset_import.extend(
        helper.make_opsetid(d, v) for d, v in domains.items() if d not in known
    )


def _replace_identity_losses(low: Lowered) -> None:
    g = low.model.graph
    for i, node in enumerate(g.node):
        if node.domain != "poptorch" or node.op_type != "IdentityLoss":
            continue
        reduction = helper.get_attribute_value(node.attribute[0]) if node.attribute else 0
        op = {0: "ReduceSum", 1: "ReduceMean", 2: "Identity"}[int(reduction)]
        new = helper.make_node(op, [node.input[0]], [node.output[0]], name=node.name)
        if op != "Identity":
            new.attribute.append(helper.make_attribute("keepdims", 0))
        g.node[i].CopyFrom(new)
        if low.loss is not None:
            raise Error(
                "the model calls identity_loss more than once: combine the losses into one "
                "and mark that",
                type="poptorch_python_error",
                location="identity_loss",
            )
        low.loss = node.output[0]
    kept = [o for o in low.model.opset_import if o.domain != "poptorch"]
    del low.model.opset_import[:]
    low.model.opset_import.extend(kept)


def _find_loss(low: Lowered) -> None:
    """The training loss: identity_loss's, else the model's last output (PopTorch models return
    `loss` or `(outputs..., loss)`)."""
    if low.loss is not None:
        if low.loss in low.outputs:
            low.loss_output = low.outputs.index(low.loss)
        return
    if not low.outputs:
        raise Error(
            "a training model must return its loss (a scalar tensor, or the last of a tuple)",
            type="poptorch_python_error",
            location="trainingModel",
        )
    low.loss = low.outputs[-1]
    low.loss_output = len(low.outputs) - 1
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in low.model.graph.output
    }
    if int(np.prod(shapes.get(low.loss, [1]))) != 1:
        raise Error(
            f"a training model's last output is its loss and must be a scalar, got shape "
            f"{shapes[low.loss]}; reduce it, or mark it with poptorch.identity_loss",
            type="poptorch_python_error",
            location="trainingModel",
        )
