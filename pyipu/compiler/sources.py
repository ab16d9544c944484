"""Where the compiled program came from: the ONNX nodes and the names of every tensor.

The compiler records, for each tensor of the table, the ONNX node whose lowering created it,
and stores that with the graph's nodes in the "pyipu.sources" opaque blob (JSON). The IPU
Model's cycle bars, the graph view and the names of a loaded PopEF's tensors come from it, so a
file read back maps its instructions to the model's nodes as the freshly compiled one does. A
file without the blob (written by another tool) still loads: its tensors are named `t<N>`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyipu.errors import CorruptFileError

if TYPE_CHECKING:
    from pyipu.compiler.ir import ModelIR

SOURCES_BLOB = "pyipu.sources"
_VERSION = 1
NO_NODE = -1
# How a node's work is done (roles()): by instructions writing its tensors; by another node's
# instructions (a fusion); by none, as a zero-copy view, as a buffer its producers write in
# place (Concat), or at compile time.
COMPUTED, FUSED, VIEW, IN_PLACE, FOLDED = "computed", "fused", "view", "in place", "folded"


@dataclass(frozen=True)
class SourceNode:
    """One node of the compiled ONNX graph (a fused model's nodes of every subgraph)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Sources:
    nodes: tuple[SourceNode, ...]
    tensor_names: tuple[str, ...]
    tensor_nodes: tuple[int, ...]  # per tensor: index into nodes, NO_NODE if none made it
    tensor_bases: tuple[int, ...]  # per tensor: the root it is a zero-copy view of, or -1

    def blob(self) -> tuple[str, bytes]:
        doc = {
            "version": _VERSION,
            "nodes": [[n.name, n.op_type, list(n.inputs), list(n.outputs)] for n in self.nodes],
            "tensors": [
                list(p)
                for p in zip(self.tensor_names, self.tensor_nodes, self.tensor_bases, strict=True)
            ],
        }
        return SOURCES_BLOB, json.dumps(doc, separators=(",", ":")).encode()


def roles(src: Sources, ir: ModelIR) -> list[tuple[str, int]]:
    """Per node of `ir`'s record: (how its work is done, the node whose instructions do it).
    A fused node's work is done by the first node downstream of it that has instructions
    (NO_NODE when its result is never used)."""
    # tensors some instruction of a run writes (the Load program's BINDs are not a computation)
    written = {
        o for p in ir.programs if p.id != ir.load_program for ins in p.instrs for o in ins.outputs
    }
    owned: list[list[int]] = [[] for _ in src.nodes]
    for t, k in enumerate(src.tensor_nodes):
        if k != NO_NODE:
            owned[k].append(t)
    written_roots = {src.tensor_bases[t] for t in written}
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(src.nodes):
        for v in n.inputs:
            consumers.setdefault(v, []).append(k)
    out: list[tuple[str, int]] = [(FOLDED, NO_NODE)] * len(src.nodes)
    # nodes are in lowering (topological) order: consumers are resolved before producers
    for k in reversed(range(len(src.nodes))):
        ts = owned[k]
        if any(t in written for t in ts):
            out[k] = (COMPUTED, k)
        elif not ts:
            out[k] = (FOLDED, NO_NODE)
        elif any(t in written_roots for t in ts):
            out[k] = (IN_PLACE, NO_NODE)
        elif all(src.tensor_bases[t] != -1 for t in ts):
            out[k] = (VIEW, NO_NODE)
        else:
            users = sorted(c for v in src.nodes[k].outputs for c in consumers.get(v, ()) if c > k)
            doers = (out[c][1] for c in users if out[c][0] in (COMPUTED, FUSED))
            out[k] = (FUSED, next((d for d in doers if d != NO_NODE), NO_NODE))
    return out


def node_name(name: str, op_type: str, index: int) -> str:
    """A node's name, or `<op_type>_<index>` for an unnamed one (as ONNX tools show them)."""
    return name or f"{op_type}_{index}"


def parse(payload: bytes, num_tensors: int) -> Sources:
    """The Sources of a "pyipu.sources" payload; CorruptFileError if it is malformed."""
    try:
        doc = json.loads(payload)
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise ValueError("unknown version")
        nodes = tuple(_node(n) for n in doc["nodes"])
        tensors = doc["tensors"]
        if not isinstance(tensors, list) or len(tensors) != num_tensors:
            raise ValueError(f"{num_tensors} tensors expected")
        names = tuple(_str(t[0]) for t in tensors)
        owners = tuple(_index(t[1], len(nodes)) for t in tensors)
        bases = tuple(_index(t[2], num_tensors) for t in tensors)
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
        raise CorruptFileError(f"{SOURCES_BLOB} blob: {e}") from None
    return Sources(nodes, names, owners, bases)


def of(opaque: Sequence[tuple[str, bytes]], num_tensors: int) -> Sources | None:
    """The Sources stored in a ModelIR's opaque blobs, or None."""
    for name, payload in opaque:
        if name == SOURCES_BLOB:
            return parse(payload, num_tensors)
    return None


def named(ir: ModelIR) -> ModelIR:
    """`ir` with its tensors named as when it was compiled (a decoded file names them t<N>)."""
    src = of(ir.opaque, len(ir.tensors))
    if src is None:
        return ir
    tensors = tuple(
        dataclasses.replace(t, name=n) for t, n in zip(ir.tensors, src.tensor_names, strict=True)
    )
    return dataclasses.replace(ir, tensors=tensors)


def _node(n: object) -> SourceNode:
    if not isinstance(n, list) or len(n) != 4:
        raise ValueError("a node is [name, op_type, inputs, outputs]")
    if not isinstance(n[2], list) or not isinstance(n[3], list):
        raise ValueError("node inputs and outputs are lists")
    return SourceNode(
        _str(n[0]), _str(n[1]), tuple(_str(s) for s in n[2]), tuple(_str(s) for s in n[3])
    )


def _str(s: object) -> str:
    if not isinstance(s, str):
        raise ValueError(f"{s!r} is not a string")
    return s


def _index(k: object, n: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not -1 <= k < n:
        raise ValueError(f"index {k!r} out of range")
    return k
