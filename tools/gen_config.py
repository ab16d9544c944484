"""Write the code and docs that follow from the runtime options table (pyipu/_options.py).

    python tools/gen_config.py           # rewrite the generated regions
    python tools/gen_config.py --check   # exit 1 (listing them) when a region is stale

Each target is a region of an existing file, between a `BEGIN GENERATED <region>` line and an
`END GENERATED <region>` line, so the public headers stay whole and readable. The generated
lines take the indentation of the BEGIN line.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TABLE = "pyipu/_options.py"


def _load_table() -> Any:
    # By path: importing the pyipu package would need its extension built.
    spec = importlib.util.spec_from_file_location("_options", REPO / TABLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_options"] = module  # dataclasses looks the module up while building Option
    spec.loader.exec_module(module)
    return module


T = _load_table()
WIDTH = 100  # the longest line the C, Cython and Python sources use


def _c_type(ctype: str) -> str:
    return "int" if ctype in (T.BOOL, T.INT) else ctype


def _c_value(o: Any) -> str:
    if o.default in T.C_NAMES:
        return T.C_NAMES[o.default]
    value = int(o.default)
    return f"{value}u" if o.ctype in (T.U32, T.U64) else str(value)


def c_fields(layer: str, indent: int) -> list[str]:
    """The struct's members, each with its comment and default."""
    opts = T.options(layer)
    decls = [f"{_c_type(o.ctype)} {o.name};" for o in opts]
    column = max(map(len, decls)) + 1
    lines = []
    for o, decl in zip(opts, decls, strict=True):
        default = _c_value(o).rstrip("u")
        # \0: a space the wrapping must not break at
        text = f"{o.c_doc or o.doc} (default\0{default})"
        room = WIDTH - indent - column - len("/*  */")
        wrapped = [part.replace("\0", " ") for part in textwrap.wrap(text, room)]
        first = f"{decl:<{column}}/* {wrapped[0]}"
        rest = [" " * (column + 3) + part for part in wrapped[1:]]
        body = [first, *rest]
        body[-1] += " */"
        lines += body
    return lines


def c_defaults(layer: str) -> list[str]:
    return [f"c.{o.name} = {_c_value(o)};" for o in T.options(layer)]


def c_runtime_to_session() -> list[str]:
    shared = [o for o in T.options(T.C_RUNTIME) if T.C_SESSION in o.layers]
    return [f"sc.{o.name} = rt->cfg.{o.name};" for o in shared]


def pxd_fields(layer: str) -> list[str]:
    return [f"{_c_type(o.ctype)} {o.name}" for o in T.options(layer)]


def cython_copy(layer: str, indent: int) -> list[str]:
    """dict -> C struct: keys left out keep the C default."""
    lines = []
    for o in T.options(layer):
        head = f"cfg.{o.name} = config.get("
        line = f'{head}"{o.name}", cfg.{o.name})'
        if indent + len(line) <= WIDTH - 1:
            lines.append(line)
        else:
            lines += [f'{head}"{o.name}",', " " * len(head) + f"cfg.{o.name})"]
    return lines


def _py_annotation(o: Any) -> str:
    if o.ctype == T.OBJECT:
        return o.py_type
    kind = "bool" if o.ctype == T.BOOL else "int"
    return f"{kind} | None" if o.python_default is None else kind


def py_fields(layer: str) -> list[str]:
    lines = []
    opts = T.options(layer)
    first = [T.BY_NAME[name] for name in T.PY_SESSION_ORDER]
    for o in first + [o for o in opts if o not in first]:
        value = o.python_default
        text = T.PY_NAMES.get(value, repr(value)) if type(value) is int else repr(value)
        lines.append(f"{o.name}: {_py_annotation(o)} = {text}")
    return lines


_LAYER_WORDS = {
    T.PY_RUNTIME: "`RuntimeConfig`",
    T.PY_SESSION: "`SessionConfig`",
    T.C_RUNTIME: "C runtime",
    T.C_SESSION: "C session",
}


def _doc_default(o: Any) -> str:
    if o.doc_default:
        return o.doc_default
    value = o.python_default if set(o.layers) & {T.PY_RUNTIME, T.PY_SESSION} else o.default
    return str(value)


def docs_table() -> list[str]:
    lines = ["| option | default | in | effect in pyipu |", "|---|---|---|---|"]
    for o in T.OPTIONS:
        python = bool(set(o.layers) & {T.PY_RUNTIME, T.PY_SESSION})
        name = f"`{o.name}`" + (" (**pyipu**)" if o.pyipu and python else "")
        where = ", ".join(_LAYER_WORDS[layer] for layer in T.LAYERS if layer in o.layers)
        lines.append(f"| {name} | {_doc_default(o)} | {where} | {o.doc} |")
    return lines


# (file, region) -> the region's lines, given the BEGIN line's indentation.
REGIONS: dict[tuple[str, str], Callable[[int], list[str]]] = {
    ("runtime_c/include/ipu/ipu_runtime.h", "fields"): lambda i: c_fields(T.C_RUNTIME, i),
    ("runtime_c/include/ipu/ipu_session.h", "fields"): lambda i: c_fields(T.C_SESSION, i),
    ("runtime_c/src/runtime/runtime.c", "defaults"): lambda i: c_defaults(T.C_RUNTIME),
    ("runtime_c/src/runtime/runtime.c", "session"): lambda i: c_runtime_to_session(),
    ("runtime_c/src/runtime/session.c", "defaults"): lambda i: c_defaults(T.C_SESSION),
    ("pyipu/_cipu.pxd", "ipu_runtime_config"): lambda i: pxd_fields(T.C_RUNTIME),
    ("pyipu/_cipu.pxd", "ipu_session_config"): lambda i: pxd_fields(T.C_SESSION),
    ("pyipu/_core.pyx", "copy"): lambda i: cython_copy(T.C_RUNTIME, i),
    ("pyipu/_session.pyx", "copy"): lambda i: cython_copy(T.C_SESSION, i),
    ("pyipu/model_runtime/session.py", "fields"): lambda i: py_fields(T.PY_SESSION),
    ("docs/runtime.md", "options"): lambda i: docs_table(),
}


def _marker(path: str, kind: str, region: str) -> str:
    text = f"{kind} GENERATED {region}"
    if kind == "BEGIN":
        text += f": tools/gen_config.py from {TABLE}"
    if path.endswith((".h", ".c")):
        return f"/* {text} */"
    if path.endswith(".md"):
        return f"<!-- {text} -->"
    return f"# {text}"


def render(path: str, text: str) -> str:
    """`text` with every region of `path` regenerated."""
    lines = text.split("\n")
    for (file, region), make in REGIONS.items():
        if file != path:
            continue
        begin, end = _marker(path, "BEGIN", region), _marker(path, "END", region)
        starts = [n for n, line in enumerate(lines) if line.strip() == begin]
        ends = [n for n, line in enumerate(lines) if line.strip() == end]
        if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
            raise SystemExit(f"{path}: expected one '{begin}' ... '{end}' region")
        indent = len(lines[starts[0]]) - len(lines[starts[0]].lstrip())
        body = [(" " * indent + line).rstrip() for line in make(indent)]
        lines[starts[0] + 1 : ends[0]] = body
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale files, write none")
    args = parser.parse_args(argv)
    stale = []
    for path in sorted({file for file, _ in REGIONS}):
        current = (REPO / path).read_text()
        wanted = render(path, current)
        if wanted != current:
            stale.append(path)
            if not args.check:
                (REPO / path).write_text(wanted)
    if args.check and stale:
        print("stale (run python tools/gen_config.py):", *stale, sep="\n  ")
        return 1
    print(("rewrote: " + ", ".join(stale)) if stale else "generated files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
