"""The ONNX backend conformance suite for pyipu: case discovery, exclusion rules, known failures.

Shared by tests/onnx_backend/test_node_suite.py and tools/onnx_support.py.

Exclusion rules, in order:

1. `_cuda` variants: pyipu.backend supports "CPU" and "IPU" only.
2. `# UNSUPPORTED: <Op> is not implemented yet`: the test's model (including If/Loop/Scan
   bodies and model-local functions) uses an op that pyipu.compiler.ops.REGISTRY lacks and that
   has no ONNX function body to expand at the model's opset, an op of a domain pyipu lowers
   nothing of (`pyipu.compiler.lower.domain_supported`), or an op whose registered lowerings
   all start after the model's opset.
   Computed from the registry at import time, so newly registered ops are picked up.
3. known_failures.txt: every remaining failing test, by exact name, with a one-line reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx.backend.test.loader import load_model_tests

from pyipu.compiler.functions import has_function
from pyipu.compiler.lower import domain_supported

HERE = Path(__file__).resolve().parent
KNOWN_FAILURES = HERE / "known_failures.txt"

# BackendTest's categories (onnx 1.23): kind passed to load_model_tests -> category name.
KINDS = {
    "node": "Node",
    "real": "Real",  # the packaged "light" models (data/light/*.onnx)
    "simple": "Simple",
    "pytorch-converted": "PyTorchConverted",
    "pytorch-operator": "PyTorchOperator",
}
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class Case:
    name: str  # BackendTest base name, without the _cpu/_cuda suffix
    kind: str
    model: onnx.ModelProto | None
    reason: str | None = None  # exclusion reason from the op rule, None when runnable


def _model_path(tc: object) -> str | None:
    model_dir = getattr(tc, "model_dir", None)
    if model_dir:
        return os.path.join(model_dir, "model.onnx")
    url = getattr(tc, "url", None)
    if url and url.startswith("onnx/backend/test/data/light/"):
        root = Path(onnx.__file__).resolve().parent.parent
        return str(root / url)
    return None


def _load(tc: object) -> onnx.ModelProto | None:
    model = getattr(tc, "model", None)
    if model is not None:
        return model
    path = _model_path(tc)
    if path and os.path.exists(path):
        return onnx.load(path, load_external_data=False)
    return None


def iter_cases() -> Iterator[Case]:
    available = set(os.listdir(Path(onnx.backend.test.loader.DATA_DIR)))
    for kind in KINDS:
        if kind != "node" and kind not in available:
            continue
        for tc in load_model_tests(kind=kind):
            yield Case(tc.name, kind, _load(tc))


def _graph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graph_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graph_nodes(g)


def model_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(domain, op_type) of every node, including subgraphs and local functions."""
    local = {(f.domain, f.name) for f in model.functions}
    ops: list[tuple[str, str]] = []
    nodes: Iterable[onnx.NodeProto] = _graph_nodes(model.graph)
    for f in model.functions:
        nodes = [*nodes, *f.node]
    for node in nodes:
        key = (node.domain or "", node.op_type)
        if key in local:
            continue  # the function's body nodes are checked instead
        if key not in ops:
            ops.append(key)
    return ops


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return int(o.version)
    return 1


def unsupported_reason(model: onnx.ModelProto | None, registry: dict) -> str | None:
    """Why the op rule excludes this model, or None."""
    if model is None:
        return "UNSUPPORTED: model file not available offline"
    opset = default_opset(model)
    for domain, op in model_ops(model):
        if not domain_supported(domain, op):
            return f"UNSUPPORTED: {domain}.{op} is not implemented yet"
        if has_function(op, opset):
            continue  # lowered through its ONNX function body when the registry lacks it
        if op not in registry:
            return f"UNSUPPORTED: {op} is not implemented yet"
        if min(registry[op]) > opset:
            return f"UNSUPPORTED: {op} before opset {min(registry[op])} is not implemented yet"
    return None


def load_known_failures(path: Path = KNOWN_FAILURES) -> dict[str, str]:
    """{base test name: reason} from `test_name  # BUG: reason` lines."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        out[name.strip()] = reason.strip() or "BUG: (no reason given)"
    return out


def classify(registry: dict) -> tuple[list[Case], dict[str, str]]:
    """All cases, each with its op-rule reason, and the checked-in known failures."""
    cases = list(iter_cases())
    for c in cases:
        c.reason = unsupported_reason(c.model, registry)
    return cases, load_known_failures()


def exclusion_patterns(cases: list[Case], known: dict[str, str]) -> dict[str, str]:
    """{anchored regex: reason} for BackendTest.exclude()."""
    pats = {r"^test_.*_cuda$": "UNSUPPORTED: device CUDA (pyipu runs on CPU/IPU only)"}
    for c in cases:
        reason = c.reason or known.get(c.name)
        if reason:
            pats[f"^{re.escape(c.name)}_cpu$"] = reason
    return pats
