"""The opcode table (runtime_c/include/ipu/ipu_ops.def) as the one source of opcode facts: the
Python enums read it through the extension, docs/bytecode.md's summary is generated from it, and
every op-family module registers its lowerings without a hand-kept list."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pyipu.compiler as compiler_pkg
from pyipu.compiler import ops
from pyipu.compiler.ir import OP_ARITY
from pyipu.enums import Op

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "opcode_table.py"


def _rows() -> list[dict[str, str]]:
    spec = importlib.util.spec_from_file_location("opcode_table", TOOL)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse(mod.DEF.read_text())


def test_enum_and_arity_match_the_table() -> None:
    rows = _rows()
    assert {r["name"]: int(r["value"]) for r in rows} == {o.name: o.value for o in Op}
    for r in rows:
        want = (int(r["min_in"]), int(r["max_in"]), int(r["n_out"]))
        assert OP_ARITY[int(r["value"])] == want, r["name"]


def test_bytecode_doc_summary_is_current() -> None:
    res = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_op_family_module_registers_itself() -> None:
    families = {
        f"{compiler_pkg.__name__}.{m.name}"
        for m in pkgutil.iter_modules(compiler_pkg.__path__)
        if m.name.startswith("ops_")
    }
    assert families <= set(sys.modules)
    owners = {fn.__module__ for versions in ops.REGISTRY.values() for fn in versions.values()}
    # every family but the 3-D helpers of ops_nn contributes lowerings
    assert families - owners <= {f"{compiler_pkg.__name__}.ops_nn3d"}
