"""`meson install` of the C library, used the way an embedder would (docs/c-api.md).

Installs libipu.so, the public headers and ipu.pc into a temporary prefix, then checks that
  * the include directory holds exactly runtime_c/include/ipu/, and every header compiles on its
    own with -std=c11 -Wall -Wextra -Wpedantic -Werror;
  * the library exports exactly the IPU_API functions the headers declare (no internals);
  * the C examples build with `pkg-config --cflags --libs ipu` alone and run correctly
    against the installed library;
  * the Python package's own libipu.so exports the same functions plus the internal ones its
    extension modules call, and an example links and runs against it.
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

import pyipu

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
    # Only the C library: the Python package's libipu.so and extension modules are not needed
    # here (pyipu/ipu, tag python-runtime).
    _run([meson, "compile", "-C", str(build), "./ipu:shared_library"], env, timeout=1200)
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
    declared = _declared(repo)
    assert "ipu_set_allocator" in declared and "ipu_runtime_submit" in declared
    assert _exported(prefix / "lib" / "libipu.so") == declared


@pytest.mark.slow
@pytest.mark.parametrize(
    ("example", "popef"),
    [("embed.c", "add.popef"), ("embed_callbacks.c", "add.popef"), ("train.c", "train.popef")],
)
def test_example_builds_with_pkg_config(
    repo: Path, prefix: Path, tmp_path: Path, example: str, popef: str
) -> None:
    exe = tmp_path / Path(example).stem
    flags = _pkg_config(prefix, "--cflags", "--libs")
    _run(
        ["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
         str(repo / "examples" / example), *flags, "-pthread", "-lm", "-o", str(exe)],
        subprocess_env(),
    )  # fmt: skip
    env = subprocess_env()
    env["LD_LIBRARY_PATH"] = str(prefix / "lib")
    result = subprocess.run(
        [str(exe), str(repo / "examples" / "data" / popef)],
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


def _declared(repo: Path) -> set[str]:
    declared = set()
    for header in (repo / "runtime_c" / "include" / "ipu").glob("*.h"):
        declared |= set(API_DECL.findall(header.read_text()))
    return declared


def _exported(lib: Path) -> set[str]:
    out = _run([_require("nm"), "-D", "--defined-only", str(lib)], subprocess_env())
    return {line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ["T"]}


@pytest.fixture(scope="module")
def package_lib() -> Path:
    """The libipu.so of the installed Python package, which its extension modules load."""
    lib = Path(pyipu.__file__).parent / "libipu.so"
    assert lib.exists(), f"{lib}: the package carries no libipu.so"
    return lib


def test_package_library_exports_the_api_and_what_the_modules_call(
    repo: Path, package_lib: Path
) -> None:
    """The IPU_API functions, plus the internal ones pyipu/_cipu.pxd declares for the
    extension modules (IPU_EXTENSION_API) and no other."""
    internal = set(re.findall(r"\b(ipu__[a-z0-9_]+)\(", (repo / "pyipu" / "_cipu.pxd").read_text()))
    assert "ipu__isa_force" in internal
    assert _exported(package_lib) == _declared(repo) | internal


@pytest.mark.slow
def test_example_builds_against_the_package_library(
    repo: Path, package_lib: Path, tmp_path: Path
) -> None:
    """An embedder may link the installed package's libipu.so with the public headers."""
    _require("cc")
    exe = tmp_path / "embed"
    _run(
        ["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
         str(repo / "examples" / "embed.c"), f"-I{repo / 'runtime_c' / 'include'}",
         f"-L{package_lib.parent}", "-lipu", f"-Wl,-rpath,{package_lib.parent}", "-pthread",
         "-o", str(exe)],
        subprocess_env(),
    )  # fmt: skip
    out = _run([str(exe), str(repo / "examples" / "data" / "add.popef")], subprocess_env())
    assert out.rstrip().endswith("OK")
    assert str(package_lib) in _run(["ldd", str(exe)], subprocess_env())


def test_docs_reference_lists_every_function(repo: Path) -> None:
    """docs/c-api.md's reference names every function the headers declare."""
    doc = (repo / "docs" / "c-api.md").read_text()
    declared = _declared(repo)
    missing = sorted(name for name in declared if f"`{name}`" not in doc)
    assert len(declared) > 60
    assert not missing, missing
