#!/usr/bin/env python
"""Run the ONNX backend conformance suite through pyipu.backend and write docs/onnx-support.md.

    python tools/onnx_support.py                  # run the suite, write docs/onnx-support.md
    python tools/onnx_support.py --check          # also fail if known_failures.txt is stale
    python tools/onnx_support.py --update-known   # rewrite tests/onnx_backend/known_failures.txt
    python tools/onnx_support.py --no-ort         # skip the onnxruntime.backend run side by side

The suite is the one tests/onnx_backend/test_node_suite.py runs (onnx.backend.test.BackendTest),
executed in-process with unittest. Only the `_cuda` variants and the op-rule exclusions
(ops missing from pyipu.compiler.ops.REGISTRY) are skipped here; the known failures are run so
that the list can be checked (a listed test that passes is reported as stale). --update-known
keeps the reasons already written and derives one for each new failure from its exception.
"""

from __future__ import annotations

import argparse
import collections
import io
import sys
import time
import unittest
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "onnx_backend"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.backend.test  # noqa: E402
import onnx_suite  # noqa: E402

from pyipu.compiler.functions import has_function  # noqa: E402
from pyipu.compiler.lower import OP_DOMAINS  # noqa: E402

DOC = ROOT / "docs" / "onnx-support.md"


def _reason_of(exc: BaseException | None, text: str) -> str:
    """A one-line known-failure reason from a test's exception."""
    from pyipu.compiler import errors as cerr

    if exc is None:
        last = text.strip().splitlines()[-1] if text.strip() else "failed"
        return f"BUG: {last[:150]}"
    msg = " ".join(str(exc).split())[:150]
    if isinstance(exc, cerr.UnsupportedDTypeError):
        return f"UNSUPPORTED: dtype: {msg}"
    if isinstance(exc, cerr.UnsupportedAttributeError):
        return f"UNSUPPORTED: attribute: {msg}"
    if isinstance(exc, cerr.UnsupportedOpError):
        return f"UNSUPPORTED: opset: {msg}"
    if isinstance(exc, cerr.UnsupportedError):
        return f"UNSUPPORTED: {msg}"
    if isinstance(exc, AssertionError):
        return f"BUG: wrong output: {msg.splitlines()[0] if msg else 'mismatch'}"
    return f"BUG: {type(exc).__name__}: {msg}"


class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.exc: BaseException | None = None

    def _keep(self, err: tuple) -> None:
        self.exc = err[1]

    def addError(self, test, err) -> None:  # noqa: N802, ANN001
        super().addError(test, err)
        self._keep(err)

    def addFailure(self, test, err) -> None:  # noqa: N802, ANN001
        super().addFailure(test, err)
        self._keep(err)


def run_suite(backend, cases, skip_reasons: dict[str, str]) -> dict[str, tuple[str, str]]:  # noqa: ANN001
    """{base name: (status, detail)}, status in pass/fail/excluded."""
    bt = onnx.backend.test.BackendTest(backend, "onnx_support")
    bt.exclude(r"_cuda$")
    results: dict[str, tuple[str, str]] = {}
    for c in cases:
        if c.name in skip_reasons:
            results[c.name] = ("excluded", skip_reasons[c.name])
    for cls in bt.test_cases.values():
        for attr in sorted(dir(cls)):
            if not attr.startswith("test_") or not attr.endswith("_cpu"):
                continue
            base = attr[: -len("_cpu")]
            if base in results:
                continue
            res = _Result()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cls(attr).run(res)
            if res.errors or res.failures:
                text = (res.errors or res.failures)[0][1]
                results[base] = ("fail", _reason_of(res.exc, text))
            elif res.skipped:
                results[base] = ("excluded", res.skipped[0][1])
            else:
                results[base] = ("pass", "")
    return results


def onnxruntime_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _dtype_name(elem: int) -> str:
    return onnx.TensorProto.DataType.Name(elem).lower()


def _model_dtypes(model: onnx.ModelProto) -> set[str]:
    out = set()
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out.add(_dtype_name(vi.type.tensor_type.elem_type))
    return out


def write_doc(cases, results, known, registry, elapsed, ort) -> str:  # noqa: ANN001
    by_kind = collections.defaultdict(collections.Counter)
    for c in cases:
        by_kind[c.kind][results.get(c.name, ("excluded", ""))[0]] += 1
    node = by_kind["node"]
    node_total = sum(node.values())
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    dtypes: dict[str, set[str]] = collections.defaultdict(set)
    for c in cases:
        if c.kind != "node" or c.model is None:
            continue
        status = results.get(c.name, ("excluded", ""))[0]
        for domain, op in onnx_suite.model_ops(c.model):
            key = op if domain in onnx_suite.DEFAULT_DOMAINS else f"{domain}.{op}"
            per_op[key][status] += 1
            if status == "pass" and (key in registry or OP_DOMAINS.get(op) == domain):
                dtypes[key] |= _model_dtypes(c.model)
    lines = [
        "# ONNX support",
        "",
        "Generated by `python tools/onnx_support.py` (do not edit by hand). The suite is",
        "`onnx.backend.test.BackendTest(pyipu.backend)` (onnx "
        f"{onnx.__version__}), as run by `pytest tests/onnx_backend`: every test compiles with",
        "`pyipu.compiler.Compiler.compile` and runs on the C runtime (`pyipu.runtime.Runner`).",
        "",
        "Exclusions: `_cuda` variants (pyipu.backend supports the devices CPU and IPU);",
        "tests whose model uses an op the compiler's registry lacks and that has no ONNX function",
        "body to expand (computed from `pyipu.compiler.ops.REGISTRY` and `onnx.defs`, so new ops",
        "are picked up automatically); and the failing",
        "tests listed with a reason in `tests/onnx_backend/known_failures.txt`.",
        "",
        "Backend choices: models with dynamic input dims compile at run time, once per input",
        "shape signature; float64 is not an IPU type: the backend computes float64 models in",
        "float32 with a `Float64Warning` (inputs rounded to float32, outputs widened back to",
        "float64), while `Compiler.compile` rejects float64 and points at",
        "`pyipu.compiler.float64_to_float32`; an empty (zero-size) input is compiled",
        "in as a constant, empty outputs and intermediates are rejected (`UnsupportedError`);",
        "0-d tensors are supported. Ops without a lowering of their own but with an ONNX",
        "function body (plain or context-dependent) are expanded into that body at compile time.",
        "Every op in the registry also folds when its inputs are constants: folding runs the same",
        "lowering and kernels as the runtime, and a node that cannot be folded stays in the graph",
        '(docs/compiler.md, "Constant folding").',
        "",
        "## Totals (CPU variants)",
        "",
        "| category | tests | pass | fail (known) | excluded: op not implemented |",
        "|---|---|---|---|---|",
    ]
    for kind, label in onnx_suite.KINDS.items():
        cnt = by_kind.get(kind)
        if not cnt:
            continue
        lines.append(
            f"| {label} | {sum(cnt.values())} | {cnt['pass']} | {cnt['fail']} | {cnt['excluded']} |"
        )
    lines += [
        "",
        f"**pyipu passes {node['pass']} of {node_total} node tests "
        f"({100 * node['pass'] / max(node_total, 1):.1f} %)**.",
    ]
    if ort is not None:
        ort_node = sum(1 for c in cases if c.kind == "node" and ort.get(c.name, ("",))[0] == "pass")
        lines.append(
            f"Side by side in this run, with the same BackendTest runner: **pyipu {node['pass']}, "
            f"onnxruntime {onnxruntime_version()} {ort_node}** of {node_total} node tests."
        )
    lines += [
        f"Suite run time: {elapsed:.1f} s in-process (pytest adds collection time).",
        "",
        "## Ops in the compiler registry",
        "",
        "Opset versions are the registry's `since_version` keys (a model uses the lowering with",
        "the largest key <= its opset). Dtypes are the graph input/output dtypes of the passing",
        "node tests that use the op. Test counts are node tests whose model uses the op.",
        "",
        "| op | opsets (since) | dtypes seen passing | pass | fail | excluded |",
        "|---|---|---|---|---|---|",
    ]
    # an op of another domain is named with it, as the suite's counts are
    named = {f"{OP_DOMAINS[op]}.{op}" if op in OP_DOMAINS else op: op for op in registry}
    for name in sorted(named):
        op = named[name]
        cnt = per_op.get(name, collections.Counter())
        vers = ", ".join(str(v) for v in sorted(registry[op]))
        dts = ", ".join(sorted(dtypes.get(name, ()))) or "-"
        lines.append(
            f"| {name} | {vers} | {dts} | {cnt['pass']} | {cnt['fail']} | {cnt['excluded']} |"
        )
    expanded = sorted(
        op for op in per_op if op not in registry and "." not in op and has_function(op, 10**4)
    )
    lines += [
        "",
        "## Ops lowered through their ONNX function body",
        "",
        "No lowering of their own: the compiler expands them into the ops of their (plain or",
        "context-dependent) function body, which are then lowered as above.",
        "",
        "| op | pass | fail | excluded |",
        "|---|---|---|---|",
    ]
    for op in expanded:
        cnt = per_op[op]
        lines.append(f"| {op} | {cnt['pass']} | {cnt['fail']} | {cnt['excluded']} |")
    missing = sorted(op for op in per_op if op not in named and op not in expanded)
    lines += [
        "",
        f"## Ops in the node suite that are not implemented yet ({len(missing)})",
        "",
        ", ".join(missing),
        "",
        f"## Known failures ({len(known)})",
        "",
        "See `tests/onnx_backend/known_failures.txt` for the per-test reasons. Summary:",
        "",
    ]
    kinds = collections.Counter(r.split(":")[0] for r in known.values())
    for k, n in sorted(kinds.items()):
        lines.append(f"* {k}: {n}")
    return "\n".join(lines) + "\n"


def run_ort(cases) -> dict[str, tuple[str, str]] | None:  # noqa: ANN001
    """onnxruntime.backend through the same BackendTest runner (None without onnxruntime)."""
    try:
        import onnxruntime
        import onnxruntime.backend as ort_backend
    except ImportError:
        return None
    onnxruntime.set_default_logger_severity(3)
    sink = io.StringIO()
    stdout, sys.stdout = sys.stdout, sink
    try:
        return run_suite(ort_backend, cases, {})
    finally:
        sys.stdout = stdout


def update_known(results, known) -> str:  # noqa: ANN001
    header = [
        "# Failing ONNX backend tests that are not excluded by the op rule (onnx_suite.py).",
        "# One per line: `<test name without _cpu>  # BUG|UNSUPPORTED: <one-line reason>`.",
        "# Regenerate with `python tools/onnx_support.py --update-known` (keeps the reasons",
        "# already written; derives a reason for new failures from the exception).",
        "",
    ]
    body = []
    for name in sorted(n for n, (s, _) in results.items() if s == "fail"):
        reason = known.get(name) or results[name][1]
        body.append(f"{name}  # {reason}")
    return "\n".join(header + body) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when known_failures.txt is stale")
    ap.add_argument("--update-known", action="store_true", help="rewrite known_failures.txt")
    ap.add_argument(
        "--no-ort", action="store_true", help="skip the onnxruntime.backend run side by side"
    )
    ap.add_argument("--output", type=Path, default=DOC)
    args = ap.parse_args()

    import pyipu.backend
    from pyipu.compiler.ops import REGISTRY

    np.seterr(all="ignore")
    cases, known = onnx_suite.classify(REGISTRY)
    skip = {c.name: c.reason for c in cases if c.reason}
    t0 = time.perf_counter()
    sink = io.StringIO()
    stdout, sys.stdout = sys.stdout, sink  # the onnx runner prints download/retry chatter
    try:
        results = run_suite(pyipu.backend, cases, skip)
    finally:
        sys.stdout = stdout
    elapsed = time.perf_counter() - t0
    failing = {n for n, (s, _) in results.items() if s == "fail"}
    new = sorted(failing - set(known))
    stale = sorted(n for n in known if results.get(n, ("", ""))[0] != "fail")
    if args.update_known:
        onnx_suite.KNOWN_FAILURES.write_text(update_known(results, known))
        known = onnx_suite.load_known_failures()
        print(f"wrote {onnx_suite.KNOWN_FAILURES.relative_to(ROOT)} ({len(failing)} entries)")
    ort = None if args.no_ort else run_ort(cases)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(write_doc(cases, results, known, REGISTRY, elapsed, ort))
    counts = collections.Counter(s for s, _ in results.values())
    node = {c.name for c in cases if c.kind == "node"}
    mine = sum(1 for n in node if results.get(n, ("",))[0] == "pass")
    if ort is not None:
        theirs = sum(1 for n in node if ort.get(n, ("",))[0] == "pass")
        print(f"node tests passing: pyipu {mine}, onnxruntime {theirs} (of {len(node)})")
    else:
        print(f"node tests passing: pyipu {mine} of {len(node)}")
    print(
        f"wrote {args.output}: pass {counts['pass']}, fail {counts['fail']}, "
        f"excluded {counts['excluded']} ({elapsed:.1f} s)"
    )
    if not args.update_known:
        for n in new:
            print(f"NEW FAILURE (not in known_failures.txt): {n}  # {results[n][1]}")
        for n in stale:
            print(f"STALE known failure (now {results.get(n, ('missing',))[0]}): {n}")
        if args.check and (new or stale):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
