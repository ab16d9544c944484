"""Variables: weights that the program updates and that persist on the device between steps.

A model names its variables in its metadata (key "pyipu.variables", JSON `{weight: update}`):
`weight` is an initializer, `update` a value the graph computes with the weight's dtype and
shape. The compiled executable keeps the weight in an arena tensor of its own for the whole run
(no other tensor ever shares its bytes): the Load program copies the weight's bytes into it,
Main programs read it wherever the model reads the weight, and a step ends by copying `update`
into it, so the next step reads the new value. The weight stays a weight anchor (Model Runtime
may bind a new initial value to it), and the runtime reads or writes the current value between
steps (ipu_executable_variable and the read/write_variable calls of sessions and runtimes).

Training uses them for trained weights, optimizer state, the step count and running statistics:
everything a step changes stays on the device.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pyipu.compiler.errors import CompileError
from pyipu.compiler.ir import ModelIR, np_dtype
from pyipu.compiler.lower import ARENA, GraphBuilder
from pyipu.enums import Op
from pyipu.errors import InvalidArgumentError, NotFoundError

VARIABLES_KEY = "pyipu.variables"


def read_variables(model: onnx.ModelProto) -> dict[str, str]:
    """{weight: update} from the model's metadata (empty for a model without variables)."""
    for p in model.metadata_props:
        if p.key != VARIABLES_KEY:
            continue
        try:
            mapping = json.loads(p.value)
        except ValueError as e:
            raise CompileError(f"metadata {VARIABLES_KEY!r} is not JSON: {e}") from None
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise CompileError(f"metadata {VARIABLES_KEY!r} must map weight names to value names")
        return mapping
    return {}


def set_variables(model: onnx.ModelProto, mapping: Mapping[str, str]) -> None:
    """Name the model's variables ({weight: update}) in its metadata, in place."""
    for i, p in enumerate(model.metadata_props):
        if p.key == VARIABLES_KEY:
            del model.metadata_props[i]
            break
    if mapping:
        helper.set_model_props(
            model,
            {
                **{p.key: p.value for p in model.metadata_props},
                VARIABLES_KEY: json.dumps(dict(mapping)),
            },
        )


def weights_as_inputs(
    model: onnx.ModelProto, mapping: Mapping[str, str]
) -> tuple[onnx.ModelProto, dict[str, object]]:
    """A copy of the model whose variables are graph inputs (nothing folds or pre-packs them),
    and their initial values."""
    inits = {i.name: i for i in model.graph.initializer}
    missing = sorted(set(mapping) - set(inits))
    if missing:
        raise CompileError(f"variables {missing} are not initializers of the model")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [i for i in out.graph.initializer if i.name not in mapping]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    declared = {v.name for v in out.graph.input}
    initial: dict[str, object] = {}
    for name in mapping:
        init = inits[name]
        initial[name] = numpy_helper.to_array(init)
        if name not in declared:
            out.graph.input.append(
                helper.make_tensor_value_info(name, init.data_type, list(init.dims))
            )
    return out, initial


def make_variables(
    b: GraphBuilder,
    mapping: Mapping[str, str],
    initial: Mapping[str, object],
    keep_outputs: set[str],
) -> None:
    """Turn the lowered model's input anchors named in `mapping` into variables (see the module
    docstring). Each update was lowered as an output anchor; it stays one only when the caller
    asked for it (`keep_outputs`)."""
    inputs = {a.name: a for a in b.anchors if a.direction == 1 and not a.has_tensor_data}
    outputs = {a.name: a for a in b.anchors if a.direction == 2}
    dropped: set[int] = set()
    for name, update in mapping.items():
        a_in, a_out = inputs.get(name), outputs.get(update)
        if a_in is None or a_out is None:
            raise CompileError(f"variable {name!r}: its weight or its update {update!r} is unused")
        var, new = b.tensors[a_in.tensor], b.tensors[a_out.tensor]
        if (new.dtype, new.shape) != (var.dtype, var.shape) or var.kind != ARENA:
            raise CompileError(
                f"variable {name!r} ({var.dtype.name.lower()} {list(var.shape)}) cannot take "
                f"{update!r} ({new.dtype.name.lower()} {list(new.shape)})"
            )
        if var.base is not None or a_in.subgraph != 0:
            raise CompileError(f"variable {name!r} must be a whole input of the model")
        dropped.add(id(a_in))
        if update not in keep_outputs:
            dropped.add(id(a_out))
        # the update's stage (manual sharding) writes the variable
        b.current_stage = b.tensors[b.root(a_out.tensor)].stage
        b.emit(0, Op.COPY, [a_out.tensor], [a_in.tensor])
        b.current_stage = 0
        init = b.weight(f"{name}/initial", initial[name], 0, anchor=name)  # type: ignore[arg-type]
        b.variables[a_in.tensor] = init
    b.anchors[:] = [a for a in b.anchors if id(a) not in dropped]


def variable_anchors(ir: ModelIR) -> dict[str, int]:
    """{name: tensor index of its initial value} of the executable's variables (the weights the
    Load program copies into the arena)."""
    load = next(p for p in ir.programs if p.id == ir.load_program)
    copied = {ins.inputs[0] for ins in load.instrs if ins.op == Op.COPY}
    return {a.name: a.tensor for a in ir.anchors if a.has_tensor_data and a.tensor in copied}


def initial_values(ir: ModelIR) -> dict[str, np.ndarray]:
    """The values every Load gives the variables."""
    out = {}
    for name, t in variable_anchors(ir).items():
        spec = ir.tensors[t]
        out[name] = np.frombuffer(spec.data or b"", np_dtype(spec.dtype)).reshape(spec.shape)
    return out


def with_initial_values(ir: ModelIR, values: Mapping[str, np.ndarray]) -> ModelIR:
    """The executable with new initial values for some variables (a checkpoint: written to a
    PopEF, it resumes from these values)."""
    anchors = variable_anchors(ir)
    tensors = list(ir.tensors)
    for name, value in values.items():
        if name not in anchors:
            raise NotFoundError(f"{name!r} is not a variable of the executable")
        spec = tensors[anchors[name]]
        array = np.asarray(value)
        if array.dtype != np_dtype(spec.dtype) or array.shape != spec.shape:
            raise InvalidArgumentError(
                f"variable {name!r} is {spec.dtype.name.lower()} {list(spec.shape)}, got "
                f"{array.dtype} {list(array.shape)}"
            )
        tensors[anchors[name]] = dataclasses.replace(
            spec, data=np.ascontiguousarray(array).tobytes()
        )
    return dataclasses.replace(ir, tensors=tuple(tensors))
