"""What a new user finds from the command line: `--version`, `python -m pyipu`, help on every
option with examples, and `--list_ops` / `pyipu.supported_ops()` matching docs/onnx-support.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from helpers import subprocess_env, tool

import pyipu
from pyipu.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=subprocess_env())


def test_version(tmp_path):
    result = _run([tool("pyipu"), "--version"], tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pyipu {pyipu.__version__}"


def test_version_has_one_home():
    """VERSION is read by meson.build (and so pyproject.toml's dynamic version and the
    installed metadata pyipu.__version__ comes from) and by setup.py; the C header, which
    the compiler hash of every PopEF is made from, must say the same."""
    want = (ROOT / "VERSION").read_text().strip()
    assert pyipu.__version__ == want
    assert "version: files('VERSION')" in (ROOT / "meson.build").read_text()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dynamic"] == ["version"]
    assert '(ROOT / "VERSION").read_text()' in (ROOT / "setup.py").read_text()
    header = (ROOT / "runtime_c/include/ipu/ipu_common.h").read_text()
    assert f'#define IPU_VERSION_STRING "pyipu-{want}"' in header


def test_python_m_pyipu_help(tmp_path):
    result = _run([sys.executable, "-m", "pyipu", "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: pyipu")
    assert "examples:" in result.stdout and "--list_ops" in result.stdout


def test_every_option_has_help():
    missing = [a.option_strings for a in build_parser()._actions if not a.help]
    assert missing == []


def _documented_registry() -> dict[str, tuple[int, ...]]:
    """The "Ops in the compiler registry" table of docs/onnx-support.md: op -> opsets."""
    text = (ROOT / "docs/onnx-support.md").read_text()
    table = text.split("## Ops in the compiler registry", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([\w.]+) \| ([\d, ]+) \|", table, re.MULTILINE)
    return {op: tuple(int(v) for v in since.split(", ")) for op, since in rows}


def test_supported_ops_match_the_docs():
    ops = pyipu.supported_ops()
    lowered = {o.op_type: o.since for o in ops if not o.expanded}
    assert lowered == _documented_registry()
    expanded = {o.op_type for o in ops if o.expanded}
    assert "GroupNormalization" in expanded and not expanded & set(lowered)
    assert [o.op_type for o in ops if not o.expanded] == sorted(lowered)


def test_list_ops_cli(tmp_path):
    result = _run([tool("pyipu"), "--list_ops"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    conv = next(line for line in lines if line.startswith("Conv "))
    assert conv.split(maxsplit=1)[1] == ", ".join(map(str, _documented_registry()["Conv"]))
    n = len(_documented_registry())
    assert re.search(rf"^{n} ops lowered, \d+ expanded$", result.stdout, re.MULTILINE)


@pytest.mark.parametrize("flag", ["--precision", "--batches_per_step", "--ipu_version"])
def test_help_text_of_popart_flags(flag):
    action = next(a for a in build_parser()._actions if flag in a.option_strings)
    assert len(action.help) > 20
