"""The ONNX ops the compiler accepts: those with a lowering of their own (`ops.REGISTRY`) and those
it expands into their ONNX function body. `pyipu --list_ops` prints this list;
docs/onnx-support.md measures the same registry against the ONNX backend test suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onnx


@dataclass(frozen=True)
class OpSupport:
    """One ONNX op the compiler accepts (named `domain.op` outside the default domain).

    `since`: the opset versions where one of pyipu's lowerings starts (a model uses the largest
    one <= its opset), or, for an `expanded` op, the versions where its ONNX function body
    starts. `expanded`: the op has no lowering of its own; the compiler replaces it with its
    function body, whose ops must be supported in turn."""

    op_type: str
    since: tuple[int, ...]
    expanded: bool = False


def supported_ops() -> list[OpSupport]:
    """Every op the compiler accepts, sorted by name: the lowered ones, then the expanded ones."""
    from pyipu.compiler.lower import OP_DOMAINS
    from pyipu.compiler.ops import REGISTRY

    lowered = sorted(
        # an op of another domain is named with it
        (
            OpSupport(f"{OP_DOMAINS[op]}.{op}" if op in OP_DOMAINS else op, tuple(sorted(v)))
            for op, v in REGISTRY.items()
        ),
        key=lambda o: o.op_type,
    )
    expanded = []
    # Any: onnx's stub lacks the schemas' function fields
    schemas: Sequence[Any] = onnx.defs.get_all_schemas()
    for schema in sorted(schemas, key=lambda s: s.name):
        if schema.domain not in ("", "ai.onnx") or schema.name in REGISTRY or schema.deprecated:
            continue
        versions = set(schema.function_opset_versions)
        versions |= set(schema.context_dependent_function_opset_versions)
        if versions:
            expanded.append(OpSupport(schema.name, tuple(sorted(versions)), expanded=True))
    return lowered + expanded


def format_supported_ops(ops: list[OpSupport]) -> str:
    """The table `pyipu --list_ops` prints."""
    width = max(len(o.op_type) for o in ops) + 2
    lines = [f"{'op':<{width}}opsets (a model uses the largest one <= its opset)"]
    lines += [f"{o.op_type:<{width}}{', '.join(map(str, o.since))}" for o in ops if not o.expanded]
    lines += ["", "Expanded into their ONNX function body (no lowering of their own):"]
    lines += [f"{o.op_type:<{width}}{', '.join(map(str, o.since))}" for o in ops if o.expanded]
    lowered = sum(not o.expanded for o in ops)
    lines += ["", f"{lowered} ops lowered, {len(ops) - lowered} expanded"]
    return "\n".join(lines)
