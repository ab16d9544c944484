"""The setup.py fallback build compiles the same sources into the same layout as meson: the core
in pyipu/libipu.so and the extension modules linked to it, working."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import subprocess_env


@pytest.mark.slow
def test_setup_py_build_ext(repo, tmp_path):
    for name in ("setup.py", "pyproject.toml", "README.md", "VERSION"):
        shutil.copy(repo / name, tmp_path / name)
    for name in ("pyipu", "magics", "runtime_c"):
        ignore = shutil.ignore_patterns(
            "*.so", "__pycache__", "_core.c", "_session.c", "_fast_path.c"
        )
        shutil.copytree(repo / name, tmp_path / name, ignore=ignore)
    env = subprocess_env()
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    lib = tmp_path / "pyipu" / "libipu.so"
    modules = sorted((tmp_path / "pyipu").glob("_*.so"))
    assert lib.exists() and len(modules) == 3, modules
    for module in modules:
        ldd = subprocess.run(["ldd", str(module)], capture_output=True, text=True, env=env)
        assert f"libipu.so => {lib}" in ldd.stdout, ldd.stdout + ldd.stderr
    smoke = f"ROOT = {str(tmp_path)!r}\n" + textwrap.dedent(
        """
        import numpy as np, onnx, pyipu
        from onnx import helper, TensorProto
        from pyipu import runtime
        from pyipu.compiler import Compiler, CompilerOptions
        assert pyipu.__file__.startswith(ROOT), pyipu.__file__
        g = helper.make_graph([helper.make_node("Add", ["X", "Y"], ["Z"])], "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2, 3)) for n in "XY"],
            [helper.make_tensor_value_info("Z", TensorProto.FLOAT, (2, 3))])
        exe = Compiler.compile(helper.make_model(g), None, CompilerOptions())
        x = np.arange(6, dtype=np.float32).reshape(2, 3); z = np.zeros_like(x)
        with runtime.Runner(exe) as r:
            r.execute({"X": x, "Y": x}, {"Z": z})
        assert (z == 2 * x).all(), z
        print("ok")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", smoke], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert run.returncode == 0 and "ok" in run.stdout, run.stdout + run.stderr
