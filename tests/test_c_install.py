"""`meson install` of the C library, used the way an embedder would (docs/c-api.md).

Installs libipu.so, the public headers and ipu.pc into a temporary prefix, then checks that
  * the include directory holds exactly runtime_c/include/ipu/, and every header compiles on its
    own with -std=c11 -Wall -Wextra -Wpedantic -Werror;
  * the library exports exactly the IPU_API functions the headers declare (no internals);
  * the two C examples build with `pkg-config --cflags --libs ipu` alone and run correctly
    against the installed library.
Needs a C compiler and pkg-config: skipped with the reason when one is missing, except under
CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import subprocess_env, tool

API_DECL = re.compile(r"IPU_API\b[^;{]*?\b(ipu_[a-z0-9_]+)\s*\(", re.S)


def _require(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (Debian: apt-get install -y {name})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(cmd: list[str], env: dict[str, str], timeout: int = 600) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(cmd)}\n{result.stdout[-6000:]}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def prefix(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _require("cc")
    _require("pkg-config")
    root = tmp_path_factory.mktemp("install")
    build, prefix = root / "build", root / "prefix"
    env = subprocess_env()
    meson = tool("meson")
    _run(
        [meson, "setup", str(build), str(repo), "-Dtests=false", "-Dcapi=true",
         f"--prefix={prefix}", "--libdir=lib", "--werror"],
        env,
    )  # fmt: skip
    # Only the C library: the Python extension is not needed here (tag python-runtime).
    _run([meson, "compile", "-C", str(build), "ipu:shared_library"], env, timeout=1200)
    _run([meson, "install", "-C", str(build), "--no-rebuild", "--tags", "runtime,devel"], env)
    return prefix


def _pkg_config(prefix: Path, *args: str) -> list[str]:
    env = subprocess_env()
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    return shlex.split(_run(["pkg-config", *args, "ipu"], env))


@pytest.mark.slow
def test_installed_files(repo: Path, prefix: Path, tmp_path: Path) -> None:
    source = repo / "runtime_c" / "include" / "ipu"
    installed = prefix / "include" / "ipu"
    assert sorted(p.name for p in installed.iterdir()) == sorted(p.name for p in source.iterdir())
    assert (prefix / "lib" / "libipu.so").exists()
    assert _pkg_config(prefix, "--modversion") == ["0.1.0"]
    cflags = _pkg_config(prefix, "--cflags")
    for header in sorted(installed.glob("*.h")):
        src = tmp_path / f"{header.stem}.c"
        src.write_text(f'#include "ipu/{header.name}"\nint main(void) {{ return 0; }}\n')
        _run(
            ["cc", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", *cflags,
             "-c", str(src), "-o", str(tmp_path / f"{header.stem}.o")],
            subprocess_env(),
        )  # fmt: skip


@pytest.mark.slow
def test_exports_exactly_the_public_api(repo: Path, prefix: Path) -> None:
    nm = _require("nm")
    declared = set()
    for header in (repo / "runtime_c" / "include" / "ipu").glob("*.h"):
        declared |= set(API_DECL.findall(header.read_text()))
    out = _run([nm, "-D", "--defined-only", str(prefix / "lib" / "libipu.so")], subprocess_env())
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ["T"]}
    assert "ipu_set_allocator" in declared and "ipu_runtime_submit" in declared
    assert exported == declared


@pytest.mark.slow
@pytest.mark.parametrize("example", ["embed.c", "embed_callbacks.c"])
def test_example_builds_with_pkg_config(
    repo: Path, prefix: Path, tmp_path: Path, example: str
) -> None:
    exe = tmp_path / Path(example).stem
    flags = _pkg_config(prefix, "--cflags", "--libs")
    _run(
        ["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
         str(repo / "examples" / example), *flags, "-pthread", "-o", str(exe)],
        subprocess_env(),
    )  # fmt: skip
    env = subprocess_env()
    env["LD_LIBRARY_PATH"] = str(prefix / "lib")
    result = subprocess.run(
        [str(exe), str(repo / "examples" / "data" / "add.popef")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("OK")
    # It ran the installed library, not some other copy.
    ldd = _run(["ldd", str(exe)], env)
    assert str(prefix / "lib" / "libipu.so") in ldd


def test_docs_reference_lists_every_function(repo: Path) -> None:
    """docs/c-api.md's reference names every function the headers declare."""
    doc = (repo / "docs" / "c-api.md").read_text()
    declared = set()
    for header in (repo / "runtime_c" / "include" / "ipu").glob("*.h"):
        declared |= set(API_DECL.findall(header.read_text()))
    missing = sorted(name for name in declared if f"`{name}`" not in doc)
    assert len(declared) > 60
    assert not missing, missing
