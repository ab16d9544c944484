"""The README's snippets run as written: its Python blocks in order in one namespace, and every
command of its "Command line" block, in a scratch directory."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from helpers import subprocess_env, tool

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def _commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def test_python_snippets_run(tmp_path, monkeypatch):
    blocks = _blocks("python")
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i}", "exec"), namespace)  # noqa: S102
    assert (tmp_path / "executable.popef").is_file()


def test_command_line_snippets_run(tmp_path):
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    (block,) = _blocks("bash", section)
    commands = _commands(block)
    assert commands[0].startswith("pyipu-demo --save_model")
    for command in commands:
        argv = shlex.split(command)
        result = subprocess.run(
            [tool(argv[0]), *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=600,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    assert (tmp_path / "out" / "executable.popef").is_file()


def test_setup_commands_come_first():
    """The README opens with exactly the two set-up commands."""
    first = _blocks("bash")[0]
    assert [c.split(" && ")[0] for c in _commands(first)] == [
        "pip install .",
        'pip install ".[test]"',
    ]
