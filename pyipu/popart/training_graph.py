"""The ONNX graph of one training micro-batch: replicas of the forward pass, the backward pass,
gradient accumulation and the optimizer's update, every piece of state named as a variable
(pyipu.compiler.variables) so that it stays on the device between micro-batches.

Replication (data parallelism): the forward pass is written once per replica, each reading its
own copy of the data inputs (`x@replica1`, ...) and the shared weights; the loss differentiated
is the sum (or, with `ReductionType.Mean`, the mean) of the replicas' losses, so each weight's
gradient is the sum of the replicas' gradients: the all-reduce, as a Sum node. Running statistics
are averaged over the replicas.

Gradient accumulation: gradients add up in an accumulator per weight over `accumulation`
micro-batches; on the last one the optimizer applies their sum (or mean) and the accumulator
restarts from zero. The update is written as `Where(last, updated, unchanged)` for weights and
optimizer state, so one executable serves every micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pyipu.compiler.variables import set_variables
from pyipu.passes.graph import default_opset
from pyipu.popart.errors import popart_exception
from pyipu.training import gradients
from pyipu.training.nodes import NodeWriter
from pyipu.training.optimizers import Optimizer, Variable
from pyipu.training.placement import Stages, mark_step_end

MICRO = "optimizer/micro_batches"  # int64 variable: micro-batches run so far
_FLOAT = onnx.TensorProto.FLOAT


def replica_name(name: str, replica: int) -> str:
    return name if replica == 0 else f"{name}@replica{replica}"


@dataclass
class TrainingGraph:
    """What the session compiles and how it feeds and reads it."""

    model: onnx.ModelProto
    outputs: list[str]  # to compile: computed anchors of every replica
    data_inputs: list[str]  # the model's own inputs, fed per replica
    anchors: dict[str, str] = field(default_factory=dict)  # anchored variable → value it read


def build(
    model: onnx.ModelProto,
    loss: str,
    trainable: Sequence[str],
    running: Mapping[str, str],
    optimizer: Optimizer,
    state: Mapping[tuple[str, str], np.ndarray],
    micro_batches: int,
    anchors: Sequence[str],
    replicas: int = 1,
    accumulation: int = 1,
    mean_reduction: bool = False,
    sharded: bool = False,
) -> TrainingGraph:
    """`model` (weights as initializers, holding their current values), `state` the optimizer
    state's current values, `micro_batches` how many have run (the step count). `sharded`: the
    model's nodes are placed on virtual IPUs (see `_sharded_updates`)."""
    inits = {i.name for i in model.graph.initializer}
    data = [v.name for v in model.graph.input if v.name not in inits]
    computed = [a for a in anchors if a in {o for n in model.graph.node for o in n.output}]
    base, total, running = _replicate(model, loss, running, data, replicas, mean_reduction)
    total = _scaled(base, total, optimizer)
    stages = Stages(base.graph.node) if sharded else None
    origin: dict[str, onnx.NodeProto] = {}
    try:
        train, grads = gradients(base, total, list(trainable), origin, list(running))
    except Exception as e:
        raise popart_exception(f"cannot differentiate the model: {e}") from e
    w = NodeWriter(default_opset(train), "optimizer")
    dtypes = {i.name: helper.tensor_dtype_to_np_dtype(i.data_type) for i in train.graph.initializer}
    step = _Step(
        trainable, grads, dtypes, optimizer, state, micro_batches, accumulation, mean_reduction
    )
    if stages is not None:
        stages.place(train.graph.node, origin)
        updates, initial = _sharded_updates(w, stages, step)
    else:
        updates, initial = _updates(w, step)
    updates.update(running)
    out = TrainingGraph(train, [], data)
    anchored = len(w.nodes)
    out.anchors = {t: w.op("Identity", [t]) for t in anchors if t in updates}
    if stages is not None:
        stages.place(w.nodes[anchored:], {})
    train.graph.node.extend(w.nodes)
    train.graph.initializer.extend(initial)
    declared = {v.name for v in train.graph.input}
    for var in optimizer.variables():
        if var.name not in declared:
            train.graph.input.append(helper.make_tensor_value_info(var.name, _FLOAT, []))
    set_variables(train, updates)
    per_replica = [replica_name(a, r) for a in computed for r in range(replicas)]
    wanted = [a for a in [*per_replica, *out.anchors.values()] if a not in updates]
    out.outputs = wanted or [total]
    return out


@dataclass(frozen=True)
class _Step:
    """What the weights' updates are written from."""

    trainable: Sequence[str]
    grads: Mapping[str, str]  # weight → its gradient's value
    dtypes: Mapping[str, np.dtype]  # weight → its dtype
    optimizer: Optimizer
    state: Mapping[tuple[str, str], np.ndarray]
    micro_batches: int
    accumulation: int
    mean_reduction: bool

    def slots(self, name: str) -> dict[str, str]:
        return {s: f"{name}/{s}" for s in self.optimizer.slots()}

    def initial(self, name: str, slot: str, variable: str) -> onnx.TensorProto:
        return numpy_helper.from_array(self.state[(name, slot)], variable)


def _updates(w: NodeWriter, u: _Step) -> tuple[dict[str, str], list[onnx.TensorProto]]:
    """Every micro-batch's variable updates (one executable serves every micro-batch, see
    module) and the new variables' initial values."""
    i64 = np.int64
    a = u.accumulation
    micro = w.op("Add", [MICRO, w.const(np.asarray(1, i64))])
    if a > 1:
        acc = w.const(np.asarray(a, i64))
        last = w.op("Equal", [w.op("Mod", [micro, acc]), w.const(np.asarray(0, i64))])
        step = w.op(
            "Cast",
            [w.op("Add", [w.op("Div", [MICRO, acc]), w.const(np.asarray(1, i64))])],
            to=_FLOAT,
        )
    else:
        step = w.op("Cast", [micro], to=_FLOAT)
    updates = {MICRO: micro}
    initial = [numpy_helper.from_array(np.asarray(u.micro_batches, i64), MICRO)]
    for name in u.trainable:
        dtype = u.dtypes[name]
        slots = u.slots(name)
        grad = u.grads[name]
        if a > 1:
            buf = f"{name}/accumulated"
            grad = w.op("Add", [buf, grad])
            updates[buf] = w.op("Where", [last, w.const(np.asarray(0, dtype)), grad])
            initial.append(u.initial(name, "accumulated", buf))
            if u.mean_reduction:
                grad = w.op("Div", [grad, w.const(np.asarray(a, dtype))])
        new, new_state = u.optimizer.update(w, name, grad, slots, step, dtype)
        if a > 1:
            new = w.op("Where", [last, new, name])
            new_state = {s: w.op("Where", [last, v, slots[s]]) for s, v in new_state.items()}
        updates[name] = new
        for s, slot in slots.items():
            updates[slot] = new_state[s]
            initial.append(u.initial(name, s, slot))
    return updates, initial


def _sharded_updates(
    w: NodeWriter, stages: Stages, u: _Step
) -> tuple[dict[str, str], list[onnx.TensorProto]]:
    """The updates of a sharded (or pipelined) training graph, compiled with one step per
    weight update (`accumulation` batches per step). Each weight's gradient adds up in its
    accumulator in the stage computing it, restarting on a step's first micro-batch (a counter
    per such stage tells); the step-end program, which runs once the step's micro-batches have
    left the pipeline, applies the optimizer. So no stage writes a weight another reads while
    the pipeline runs."""
    i64 = np.int64
    a = u.accumulation
    updates: dict[str, str] = {}
    initial: list[onnx.TensorProto] = []
    firsts: dict[int, str] = {}

    def first(j: int) -> str:  # in stage j: is this micro-batch the first of its step?
        if j not in firsts:
            start = len(w.nodes)
            counter = f"{MICRO}@stage{j}"
            updates[counter] = w.op("Add", [counter, w.const(np.asarray(1, i64))])
            initial.append(numpy_helper.from_array(np.asarray(u.micro_batches, i64), counter))
            zero = w.const(np.asarray(0, i64))
            firsts[j] = w.op("Equal", [w.op("Mod", [counter, w.const(np.asarray(a, i64))]), zero])
            stages.put_all(w.nodes[start:], j)
        return firsts[j]

    accumulated = {}
    for name in u.trainable:
        grad = u.grads[name]
        j = stages.stage.get(grad, stages.count - 1)
        acc = f"{name}/accumulated"
        if a > 1:
            is_first = first(j)
            start = len(w.nodes)
            grad = w.op("Where", [is_first, grad, w.op("Add", [acc, grad])])
            stages.put_all(w.nodes[start:], j)
        updates[acc] = grad
        initial.append(u.initial(name, "accumulated", acc))
        accumulated[name] = acc
    start = len(w.nodes)
    micro = w.op("Add", [MICRO, w.const(np.asarray(a, i64))])
    step = w.op("Cast", [w.op("Div", [micro, w.const(np.asarray(a, i64))])], to=_FLOAT)
    updates[MICRO] = micro
    initial.append(numpy_helper.from_array(np.asarray(u.micro_batches, i64), MICRO))
    for name in u.trainable:
        dtype = u.dtypes[name]
        slots = u.slots(name)
        grad = accumulated[name]
        if u.mean_reduction and a > 1:
            grad = w.op("Div", [grad, w.const(np.asarray(a, dtype))])
        updates[name], new_state = u.optimizer.update(w, name, grad, slots, step, dtype)
        for s, slot in slots.items():
            updates[slot] = new_state[s]
            initial.append(u.initial(name, s, slot))
    mark_step_end(w.nodes[start:])
    return updates, initial


def _scaled(model: onnx.ModelProto, loss: str, optimizer: Optimizer) -> str:
    """The loss times the optimizer's loss scaling (the value differentiated, so every gradient
    carries the scale; the optimizer divides it out). The anchored loss stays unscaled."""
    scale = optimizer.loss_scaling
    if scale == 1.0:
        return loss
    inferred = onnx.shape_inference.infer_shapes(model).graph
    elem = next(
        (
            v.type.tensor_type.elem_type
            for v in [*inferred.value_info, *inferred.output]
            if v.name == loss
        ),
        _FLOAT,
    )
    w = NodeWriter(default_opset(model), "loss_scaling")
    if isinstance(scale, Variable):  # non-const: a float32 input, fed every step
        model.graph.input.append(helper.make_tensor_value_info(scale.name, _FLOAT, []))
        factor = scale.name if elem == _FLOAT else w.op("Cast", [scale.name], to=elem)
    else:
        factor = w.const(np.asarray(scale, helper.tensor_dtype_to_np_dtype(elem)))
    out = w.op("Mul", [loss, factor])
    model.graph.node.extend(w.nodes)
    return out


def state_slots(optimizer: Optimizer, accumulation: int, sharded: bool) -> tuple[str, ...]:
    """The per-weight state: the optimizer's, and the gradient accumulator."""
    return (*optimizer.slots(), *(("accumulated",) if accumulation > 1 or sharded else ()))


def _replicate(
    model: onnx.ModelProto,
    loss: str,
    running: Mapping[str, str],
    data: Sequence[str],
    replicas: int,
    mean: bool,
) -> tuple[onnx.ModelProto, str, dict[str, str]]:
    """The model with one forward pass per replica; the loss to differentiate; the running
    statistics' new values (averaged over the replicas)."""
    if replicas == 1:
        return model, loss, dict(running)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    shared = {i.name for i in g.initializer}
    nodes = list(g.node)
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in nodes
        for a in n.attribute
    ):
        raise popart_exception(
            "replicated training of models with control flow (If, Loop, Scan) is not supported"
        )
    for r in range(1, replicas):
        for n in nodes:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = replica_name(n.name, r) if n.name else ""
            c.input[:] = [i if not i or i in shared else replica_name(i, r) for i in n.input]
            c.output[:] = [replica_name(o, r) if o else o for o in n.output]
            g.node.append(c)
        for v in list(g.input):
            if v.name in data:
                c = onnx.ValueInfoProto()
                c.CopyFrom(v)
                c.name = replica_name(v.name, r)
                g.input.append(c)
    w = NodeWriter(default_opset(out), "replicas")
    scale = 1.0 / replicas
    total = w.op("Sum", [replica_name(loss, r) for r in range(replicas)])
    if mean:
        total = w.op("Mul", [total, w.const(np.asarray(scale, np.float32))])
    averaged = {}
    for init, value in running.items():
        s = w.op("Sum", [replica_name(value, r) for r in range(replicas)])
        averaged[init] = w.op("Mul", [s, w.const(np.asarray(scale, np.float32))])
    g.node.extend(w.nodes)
    return out, total, averaged
