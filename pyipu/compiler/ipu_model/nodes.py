"""The IPU Model's estimate per ONNX node: what each node of the model became in the compiled
program (its instructions, or the node whose fused instruction does its work), its output
shapes, estimated cycles and bytes. Needs the compiler's record of the graph
(compiler/sources.py); a file without it has no per-node view.

Example:
    >>> from pyipu.compiler.ipu_model.nodes import node_costs
    >>> for n in node_costs(exe.program, exe.report()):  # doctest: +SKIP
    ...     print(n.name, n.op_type, n.role, n.cycles)
"""

from __future__ import annotations

from dataclasses import dataclass

from pyipu.compiler import sources
from pyipu.compiler.ipu_model.cycles import InstructionCost
from pyipu.compiler.ipu_model.report import IPUModelReport
from pyipu.compiler.ir import Location, ModelIR, np_dtype


@dataclass(frozen=True)
class NodeCost:
    """One ONNX node of the compiled model.

    `role` is how its work is done (sources.COMPUTED, FUSED, VIEW, IN_PLACE, FOLDED); `done_by`
    names the node whose instructions do it (itself when computed; "" when nothing runs, or a
    fused result is never used). `instructions`, `cycles`, `output_bytes` (values its
    instructions write) and `weight_bytes` (constants they read) are those of a computed node's
    instructions, which also do the work of the nodes fused into it (`fused`)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shapes: tuple[str, ...]  # per output: "float32[1, 64, 56, 56]", "" when not in the table
    role: str
    done_by: str
    fused: tuple[str, ...]
    instructions: tuple[InstructionCost, ...]
    cycles: int
    output_bytes: int
    weight_bytes: int


def node_costs(ir: ModelIR, report: IPUModelReport) -> tuple[NodeCost, ...] | None:
    """Every node of the compiled graph, in lowering (topological) order; None when the
    executable carries no record of its graph."""
    src = sources.of(ir.opaque, len(ir.tensors))
    if src is None:
        return None
    roles = sources.roles(src, ir)
    by_node: dict[int, list[InstructionCost]] = {}
    for c in report.instructions:
        instr = ir.program(c.program).instrs[c.index]
        if instr.outputs:
            k = src.tensor_nodes[instr.outputs[0]]
            by_node.setdefault(k, []).append(c)
    fused: dict[int, list[str]] = {}
    for k, (role, doer) in enumerate(roles):
        if role == sources.FUSED and doer != sources.NO_NODE:
            fused.setdefault(doer, []).append(src.nodes[k].name)
    where = {
        (n, k): t for t, (n, k) in enumerate(zip(src.tensor_names, src.tensor_nodes, strict=True))
    }
    out: list[NodeCost] = []
    for k, node in enumerate(src.nodes):
        role, doer = roles[k]
        costs = by_node.get(k, []) if role == sources.COMPUTED else []
        instrs = [ir.program(c.program).instrs[c.index] for c in costs]
        weights = {
            t
            for ins in instrs
            for t in ins.inputs
            if ir.tensors[t].location == Location.TENSOR_DATA
        }
        out.append(
            NodeCost(
                name=node.name,
                op_type=node.op_type,
                inputs=node.inputs,
                outputs=node.outputs,
                shapes=tuple(_shape(ir, where.get((v, k))) for v in node.outputs),
                role=role,
                done_by=src.nodes[doer].name if doer != sources.NO_NODE else "",
                fused=tuple(fused.get(k, ())),
                instructions=tuple(costs),
                cycles=sum(c.cycles for c in costs),
                output_bytes=sum(ir.tensors[o].nbytes for ins in instrs for o in ins.outputs),
                weight_bytes=sum(ir.tensors[t].nbytes for t in weights),
            )
        )
    return tuple(out)


def _shape(ir: ModelIR, t: int | None) -> str:
    if t is None:
        return ""
    spec = ir.tensors[t]
    return f"{np_dtype(spec.dtype).name}{list(spec.shape)}"
