"""The repository's own checks: tools/check_file_length.py, and pyipu/_core.pyi against the
compiled extension it types."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from pyipu import _core

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


# ---------------------------------------------------------------- pyipu/_core.pyi


def _stub() -> ast.Module:
    return ast.parse((REPO / "pyipu" / "_core.pyi").read_text())


def _public(names: object) -> set[str]:
    return {n for n in names if not n.startswith("_")}  # type: ignore[attr-defined]


def _stub_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def test_the_stub_names_what_the_extension_has() -> None:
    runtime = {n for n in _public(dir(_core)) if not inspect.ismodule(getattr(_core, n))}
    assert _public(_stub_names(_stub().body)) == runtime


@pytest.mark.parametrize(
    "cls", [n for n in dir(_core) if inspect.isclass(getattr(_core, n)) and n[0] != "_"]
)
def test_the_stub_names_every_method_and_attribute(cls: str) -> None:
    node = _stub_names(_stub().body)[cls]
    assert isinstance(node, ast.ClassDef)
    assert _public(_stub_names(node.body)) == _public(vars(getattr(_core, cls)))


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
    for name, node in _stub_names(_stub().body).items():
        if isinstance(node, ast.FunctionDef) and name[0] != "_":
            out.append(pytest.param(getattr(_core, name), node, id=name))
        elif isinstance(node, ast.ClassDef):
            for meth, m in _stub_names(node.body).items():
                if isinstance(m, ast.FunctionDef) and meth[0] != "_" and not _is_property(m):
                    fn = getattr(getattr(_core, name), meth)
                    out.append(pytest.param(fn, m, id=f"{name}.{meth}"))
    return out


@pytest.mark.parametrize(("fn", "node"), _callables())
def test_the_stub_signatures_match(fn: object, node: ast.FunctionDef) -> None:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    runtime = [(p.name, p.default is not p.empty) for p in sig.parameters.values()]
    assert _parameters(node) == runtime
