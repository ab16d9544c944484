"""Constant folding: compute at compile time the nodes whose inputs are all known.

A node is folded by the compiler's own kernels: it is lowered like any other node (same op
registry, same checks) into a one-node program that the NumPy reference interpreter runs, so a
folded value is exactly what the runtime would have computed. What the kernels cannot run (ops
with data-dependent output shapes such as NonZero, float64, empty tensors) is evaluated by
onnx.reference; a node the kernels reject (out-of-range indices...) is not handed to it, as
onnx.reference would compute something else. A node that cannot be folded stays: it is lowered
and computed at run time, or lowering reports why it cannot be. Folding never fails a compile.

Results are bounded by MAX_TENSOR_BYTES, as every tensor is: checked before they are computed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from pyipu.compiler.errors import ShapeError, UnsupportedError, node_label
from pyipu.compiler.ir import MAX_TENSOR_BYTES

log = logging.getLogger("pyipu.compiler")

# Ops whose result is not a function of their inputs: never folded.
_NONDETERMINISTIC = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}


def outer_refs(node: onnx.NodeProto) -> list[str]:
    """Names the node's bodies (If/Loop/Scan) read from the enclosing scope."""
    refs: list[str] = []

    def walk(g: onnx.GraphProto, bound: set[str]) -> None:
        bound = bound | {i.name for i in g.input} | {i.name for i in g.initializer}
        for sub in g.node:
            refs.extend(i for i in sub.input if i and i not in bound and i not in refs)
            for a in sub.attribute:
                for body in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                    walk(body, bound)
            bound |= {o for o in sub.output if o}

    for a in node.attribute:
        for body in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            walk(body, set())
    return refs


def is_deterministic(node: onnx.NodeProto) -> bool:
    """Whether the node may be computed at compile time when its inputs are known."""
    return node.op_type not in _NONDETERMINISTIC and node.domain in ("", "ai.onnx")


def foldable(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> bool:
    """Whether every value the node reads, its bodies' outer references included, is known."""
    names = [*node.input, *outer_refs(node)]
    return all(not n or n in constants for n in names) and is_deterministic(node)


def fold_node(
    node: onnx.NodeProto, constants: Mapping[str, np.ndarray], model: onnx.ModelProto, opset: int
) -> list[np.ndarray] | None:
    """The values of a foldable node's outputs, or None when it cannot be folded (it is then
    left in the graph; the reason is logged at debug level)."""
    names = [*node.input, *outer_refs(node)]
    known = {n: np.asarray(constants[n]) for n in names if n}
    label = node_label(node.name, node.op_type, opset)
    try:
        return _with_kernels(node, known, model, opset)
    except UnsupportedError as e:  # an op or dtype the IPU has no kernel for
        kernel_error = e
    except Exception as e:  # bad input or too large: lowering the node reports that if needed
        log.debug("%s not folded: %s", label, e)
        return None
    try:
        return evaluate(node, known, model, opset)
    except Exception as e:
        log.debug("%s not folded: kernels: %s; onnx.reference: %s", label, kernel_error, e)
        return None


def _with_kernels(
    node: onnx.NodeProto, known: dict[str, np.ndarray], model: onnx.ModelProto, opset: int
) -> list[np.ndarray]:
    """Lower the node alone, with its inputs as weights, and run it on the reference
    interpreter (the executable form of the runtime's kernels)."""
    # Lowering imports this module: import it here.
    from pyipu.compiler.lower import COUNT_SUFFIX, GraphBuilder, Lowering
    from pyipu.compiler.memory import build_ir
    from pyipu.compiler.onnx_import import ImportedGraph
    from pyipu.compiler.ops import REGISTRY
    from pyipu.reference.numpy_interp import run

    graph = ImportedGraph(model, opset, [], [node], dict(known), set(known))
    builder = GraphBuilder()
    low = Lowering(builder, graph, 0)
    outs = [o for o in node.output if o]
    low.output_names = set(outs)
    low.lower_node(node, REGISTRY, opset, fold=False)
    if all(o in low.constants for o in outs):  # a compile-time op (Shape, Range...)
        return [np.asarray(low.constants[o]) for o in outs]
    for o in outs:
        low.add_output(o)
    result = run(build_ir(builder), {})
    values = []
    for o in outs:  # a data-dependent dim: its first `count` entries (dynamic.py)
        v = result[o]
        if o in low.dyn:
            count = int(result[f"{o}{COUNT_SUFFIX}"][0])
            v = np.take(v, np.arange(count), axis=low.dyn[o].axis)
        values.append(v)
    return values


def evaluate(
    node: onnx.NodeProto, known: Mapping[str, np.ndarray], model: onnx.ModelProto, opset: int
) -> list[np.ndarray]:
    """Run one node with onnx.reference on a one-node model (ops without an IPU kernel:
    compile-time generators, data-dependent shapes, dtypes the IPU lacks)."""
    from onnx.reference import ReferenceEvaluator

    check_generated_size(node, known, opset)
    plain = onnx.NodeProto()
    plain.CopyFrom(node)  # without pyipu's placement attributes (`__ipu_number`, ...)
    kept = [a for a in plain.attribute if not a.name.startswith("__")]
    del plain.attribute[:]
    plain.attribute.extend(kept)
    graph = helper.make_graph(
        [plain],
        "fold",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in known.items()
        ],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
    )
    imports = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
    imports.append(helper.make_opsetid("", opset))  # a function body's node has its own
    one = helper.make_model(graph, opset_imports=imports, ir_version=model.ir_version)
    one.functions.extend(model.functions)
    return [np.asarray(r) for r in ReferenceEvaluator(one).run(None, dict(known))]


def _values(known: Mapping[str, np.ndarray], names: Sequence[str], i: int) -> list[float]:
    if i >= len(names) or names[i] not in known:
        return []
    return [float(v) for v in np.asarray(known[names[i]]).reshape(-1)[:64]]


# Ops whose output size is one of their input values.
GENERATORS = frozenset(
    {"ConstantOfShape", "Range", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"}
)


def check_generated_size(node: onnx.NodeProto, known: Mapping[str, np.ndarray], opset: int) -> None:
    """Ops whose output size is one of their input values: check it before allocating."""
    ins, op = list(node.input), node.op_type
    count: float | None = None
    if op == "ConstantOfShape":
        count = math.prod(_values(known, ins, 0))
    elif op == "Range" and all(_values(known, ins, i) for i in range(3)):
        start, limit, delta = (_values(known, ins, i)[:1] for i in range(3))
        if delta[0] == 0 or not all(map(math.isfinite, [*start, *limit, *delta])):
            raise ShapeError(
                f"{node_label(node.name, op, opset)}: Range needs finite start/limit and a "
                f"non-zero delta, got {start[0]}, {limit[0]}, {delta[0]}"
            )
        count = max(math.ceil((limit[0] - start[0]) / delta[0]), 0)
    elif op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        count = math.prod(_values(known, ins, 0))
    elif op == "MelWeightMatrix":
        count = math.prod(_values(known, ins, 0)) * (math.prod(_values(known, ins, 1)) // 2 + 1)
    if count is not None and count * 8 > MAX_TENSOR_BYTES:  # 8: the widest element
        raise ShapeError(
            f"{node_label(node.name, op, opset)}: output of {count:.0f} elements is too large "
            f"to compute at compile time (at most {MAX_TENSOR_BYTES // 8})"
        )
