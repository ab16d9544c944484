"""The repository's own checks: tools/check_file_length.py, and the stubs of the extension
modules (pyipu/_core.pyi, _session.pyi, _fast_path.pyi) against the compiled modules."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from pyipu import _core, _fast_path, _session

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "check_file_length.py"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _write(path: Path, lines: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n" * lines)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    _write(tmp_path / "pkg" / "small.py", 800)
    _write(tmp_path / "src" / "ok.c", 10)
    _write(tmp_path / "docs" / "long.md", 5000)  # not a source file
    _write(tmp_path / ".hidden" / "long.py", 5000)  # hidden directories are skipped
    return tmp_path


def _allow(root: Path, text: str) -> None:
    (root / "tools").mkdir(exist_ok=True)
    (root / "tools" / "file_length_allow.txt").write_text(text)


def test_a_tree_within_the_limit_passes(tree: Path) -> None:
    r = _run(tree)
    assert r.returncode == 0, r.stderr
    assert "2 source files, limit 800 lines, 0 on the allow-list: ok" in r.stdout


@pytest.mark.parametrize("name", ["a.py", "a.pyi", "a.c", "a.h", "a.pyx", "a.pxi", "a.pxd"])
def test_a_long_source_file_fails(tree: Path, name: str) -> None:
    _write(tree / "src" / name, 801)
    r = _run(tree)
    assert r.returncode == 1
    assert f"src/{name}: 801 lines (limit 800)" in r.stderr


def test_the_limit_is_an_option(tree: Path) -> None:
    r = _run(tree, "--limit", "799")
    assert r.returncode == 1
    assert "pkg/small.py: 800 lines (limit 799)" in r.stderr


def test_an_allow_list_entry_with_a_reason_passes(tree: Path) -> None:
    _write(tree / "src" / "table.c", 900)
    _allow(tree, "# header comment\n\nsrc/table.c 950  # one generated table\n")
    r = _run(tree)
    assert r.returncode == 0, r.stderr
    assert "1 on the allow-list: ok" in r.stdout


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("src/table.c 950\n", "src/table.c needs a reason"),
        ("src/table.c  # no count\n", "expected 'PATH MAX_LINES  # reason'"),
        ("src/table.c 899  # grew\n", "900 lines, more than the 899 its allow-list entry grants"),
        ("src/table.c 950  # a\nsrc/table.c 950  # b\n", "src/table.c is listed twice"),
        ("src/table.c 950  # a\nsrc/gone.c 900  # b\n", "src/gone.c: on the allow-list but not"),
        ("src/table.c 950  # a\nsrc/ok.c 900  # b\n", "src/ok.c: 10 lines, within the limit"),
    ],
)
def test_a_bad_or_stale_allow_list_fails(tree: Path, entry: str, message: str) -> None:
    _write(tree / "src" / "table.c", 900)
    _allow(tree, entry)
    r = _run(tree)
    assert r.returncode == 1
    assert message in r.stderr


def test_the_repository_passes() -> None:
    r = _run(REPO)
    assert r.returncode == 0, r.stderr


# ------------------------------------------- pyipu/_core.pyi, _session.pyi, _fast_path.pyi

# The extension modules, each typed by the stub of the same name.
MODULES = {m.__name__.rsplit(".", 1)[1]: m for m in (_core, _session, _fast_path)}


def _stub(module: str) -> ast.Module:
    return ast.parse((REPO / "pyipu" / f"{module}.pyi").read_text())


def _public(names: object) -> set[str]:
    return {n for n in names if not n.startswith("_")}  # type: ignore[attr-defined]


def _stub_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """Functions, classes and constants of a stub, with the ones it re-exports from another
    module's stub (`from pyipu.M import X as X`, the stub spelling of a re-export)."""
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyipu._"):
            names = [a.name for a in node.names if a.asname == a.name]
            if names:
                source = _stub_names(_stub(str(node.module).rsplit(".", 1)[1]).body)
                out |= {name: source[name] for name in names}
    return out


def test_core_re_exports_the_classes_of_its_sibling_modules() -> None:
    assert _core.Session is _session.Session and _core.FastPath is _fast_path.FastPath


@pytest.mark.parametrize("module", MODULES)
def test_the_stub_names_what_the_extension_has(module: str) -> None:
    ext = MODULES[module]
    runtime = {n for n in _public(dir(ext)) if not inspect.ismodule(getattr(ext, n))}
    assert _public(_stub_names(_stub(module).body)) == runtime


@pytest.mark.parametrize(
    ("module", "cls"),
    [
        (module, n)
        for module, ext in MODULES.items()
        for n in dir(ext)
        if inspect.isclass(getattr(ext, n)) and n[0] != "_"
    ],
)
def test_the_stub_names_every_method_and_attribute(module: str, cls: str) -> None:
    node = _stub_names(_stub(module).body)[cls]
    assert isinstance(node, ast.ClassDef)
    assert _public(_stub_names(node.body)) == _public(vars(getattr(MODULES[module], cls)))


def _parameters(fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    """(name, has a default) per parameter of a stub function."""
    a = fn.args
    pos = a.posonlyargs + a.args
    flags = [False] * (len(pos) - len(a.defaults)) + [True] * len(a.defaults)
    kw = [(k.arg, d is not None) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    return [(p.arg, f) for p, f in zip(pos, flags, strict=True)] + kw


def _is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _callables() -> list[object]:
    """pytest params (runtime function, stub function) of every public function and method
    (the C-level __init__ signatures are not introspectable)."""
    out = []
    for module, ext in MODULES.items():
        for name, node in _stub_names(_stub(module).body).items():
            if isinstance(node, ast.FunctionDef) and name[0] != "_":
                out.append(pytest.param(getattr(ext, name), node, id=f"{module}.{name}"))
            elif isinstance(node, ast.ClassDef):
                for meth, m in _stub_names(node.body).items():
                    if isinstance(m, ast.FunctionDef) and meth[0] != "_" and not _is_property(m):
                        fn = getattr(getattr(ext, name), meth)
                        out.append(pytest.param(fn, m, id=f"{module}.{name}.{meth}"))
    return out


@pytest.mark.parametrize(("fn", "node"), _callables())
def test_the_stub_signatures_match(fn: object, node: ast.FunctionDef) -> None:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    runtime = [(p.name, p.default is not p.empty) for p in sig.parameters.values()]
    assert _parameters(node) == runtime
