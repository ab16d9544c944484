"""Manual sharding of an ONNX model (PopRT's `converter.Sharder` and `manual_sharding` pass).

Sharding points are nodes with a chosen IPU (and pipeline stage). As PopRT documents it: the
points are taken in topological order; from each point the graph is walked towards its inputs
and every node reached that has no placement yet gets the point's IPU and stage (the walk stops
at placed nodes). Nodes left over (after the last point) get max IPU + 1 and max stage + 1.
The placement is stored as the node attributes `__ipu_number` and `__pipeline_stage`, which the
compiler reads with `CompilerOptions.virtual_graph_mode = "manual"`.

Example:
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    >>> g = helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["h"], name="a"),
    ...      helper.make_node("Neg", ["h"], ["y"], name="b")], "g", [x], [y])
    >>> m = Sharder(sharding_info={"a": 0}, pipelining_info={"a": 0}).run(helper.make_model(g))
    >>> [(n.name, [a.i for a in n.attribute]) for n in m.graph.node]
    [('a', [0, 0]), ('b', [1, 1])]
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import onnx
from onnx import helper

from pyipu.compiler.errors import CompileError
from pyipu.compiler.staging import IPU_ATTR, STAGE_ATTR


def manual_sharding(
    model: onnx.ModelProto,
    sharding_info: Mapping[str, int],
    pipelining_info: Mapping[str, int] | None = None,
) -> onnx.ModelProto:
    """A copy of `model` with every node placed (see the module docstring)."""
    pipelining_info = dict(pipelining_info or {})
    if not sharding_info:
        raise CompileError("sharding_info must name at least one node")
    nodes = list(model.graph.node)
    index = {n.name: i for i, n in enumerate(nodes) if n.name}
    unknown = sorted((set(sharding_info) | set(pipelining_info)) - set(index))
    if unknown:
        close = {n: difflib.get_close_matches(n, index, n=1) for n in unknown}
        hints = "".join(f"; {n!r}: did you mean {c[0]!r}?" for n, c in close.items() if c)
        raise CompileError(f"sharding config names nodes the model lacks: {unknown}{hints}")
    if pipelining_info and set(pipelining_info) != set(sharding_info):
        raise CompileError(
            "pipelining_info must name the same nodes as sharding_info; differ on "
            f"{sorted(set(pipelining_info) ^ set(sharding_info))}"
        )
    for what, info in (("device", sharding_info), ("stage", pipelining_info)):
        bad = {k: v for k, v in info.items() if not isinstance(v, int) or v < 0}
        if bad:
            raise CompileError(f"sharding config: {what} must be an int >= 0, got {bad}")
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    placed: dict[int, tuple[int, int | None]] = {}
    for name in sorted(sharding_info, key=index.__getitem__):
        where = (sharding_info[name], pipelining_info.get(name))
        todo = [index[name]]
        while todo:
            i = todo.pop()
            if i in placed:
                continue
            placed[i] = where
            todo += [producer[x] for x in nodes[i].input if x in producer]
    rest_ipu = max(sharding_info.values()) + 1
    rest_stage = max(pipelining_info.values()) + 1 if pipelining_info else None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, node in enumerate(out.graph.node):
        ipu, stage = placed.get(i, (rest_ipu, rest_stage))
        keep = [a for a in node.attribute if a.name not in (IPU_ATTR, STAGE_ATTR)]
        del node.attribute[:]
        node.attribute.extend(keep)
        node.attribute.append(helper.make_attribute(IPU_ATTR, ipu))
        if stage is not None:
            node.attribute.append(helper.make_attribute(STAGE_ATTR, stage))
    return out


class Sharder:
    """`poprt.converter.Sharder`: place nodes on IPUs and pipeline stages by sharding points.

    sharding_info: sharding-point node name → IPU; pipelining_info: node name → stage.
    """

    def __init__(
        self,
        sharding_info: Mapping[str, int],
        pipelining_info: Mapping[str, int] | None = None,
    ) -> None:
        self.sharding_info = dict(sharding_info)
        self.pipelining_info = dict(pipelining_info or {})

    def run(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return manual_sharding(model, self.sharding_info, self.pipelining_info)


def parse_sharding_config(entries: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(sharding_info, pipelining_info) from a shard.yaml document: a list of
    `{node: name, device: ipu, stage: s}` (stage optional, but on all entries or none)."""
    if not isinstance(entries, list) or not entries:
        raise CompileError("a manual sharding config is a non-empty list of {node, device, stage}")
    sharding: dict[str, int] = {}
    pipelining: dict[str, int] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "node" not in e or "device" not in e:
            raise CompileError(f"sharding config entry {i} needs 'node' and 'device': {e!r}")
        extra = set(e) - {"node", "device", "stage"}
        if extra:
            raise CompileError(f"sharding config entry {i} has unknown keys {sorted(extra)}")
        name = str(e["node"])
        if name in sharding:
            raise CompileError(f"sharding config names node {name!r} twice")
        sharding[name] = e["device"]
        if "stage" in e:
            pipelining[name] = e["stage"]
    if pipelining and len(pipelining) != len(sharding):
        raise CompileError("sharding config: give 'stage' on every entry or on none")
    return sharding, pipelining


def load_sharding_config(path: str | os.PathLike) -> tuple[dict[str, int], dict[str, int]]:
    """(sharding_info, pipelining_info) of a shard.yaml file (`--manual_sharding_config`)."""
    import yaml

    from pyipu import _yaml

    try:
        doc = _yaml.load(path, f"sharding config {os.fspath(path)!r}")
    except OSError as e:
        raise CompileError(f"cannot read the sharding config {os.fspath(path)!r}: {e}") from e
    except yaml.YAMLError as e:
        raise CompileError(f"sharding config {os.fspath(path)!r} is not valid YAML: {e}") from e
    return parse_sharding_config(doc)


def shard_for_cli(
    model: onnx.ModelProto, config_path: str | os.PathLike
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """`--manual_sharding_config`: the sharded model and the CompilerOptions it needs
    (virtual_graph_mode, num_ipus = highest IPU + 1, enable_pipelining when stages are given)."""
    sharding, pipelining = load_sharding_config(config_path)
    sharded = manual_sharding(model, sharding, pipelining)
    ipus = [a.i for n in sharded.graph.node for a in n.attribute if a.name == IPU_ATTR]
    options = {
        "virtual_graph_mode": "manual",
        "num_ipus": max(ipus, default=0) + 1,
        "enable_pipelining": bool(pipelining),
    }
    return sharded, options
