"""Fallback build with setuptools + Cython, for environments without meson.

meson.build is the authoritative build (pip install . uses it through meson-python). This file
builds the same layout from the same C source list (runtime_c/sources.txt): the core linked
into pyipu/libipu.so, and the extension modules linked to it with the rpath $ORIGIN, e.g.:
    python setup.py build_ext --inplace
"""

import os
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
INCLUDE = ["runtime_c/include", "runtime_c/include/ipu"]
C_FLAGS = ["-std=c11", "-O3", "-Wall", "-Wextra"]


def core_sources() -> list[str]:
    lines = (ROOT / "runtime_c" / "sources.txt").read_text().splitlines()
    return [f"runtime_c/{s.strip()}" for s in lines if s.strip() and not s.startswith("#")]


class BuildWithLibipu(build_ext):
    """Links the core into libipu.so next to the extension modules, then builds them."""

    def run(self) -> None:
        super().run()
        if self.inplace:  # setuptools built into build_lib and copied only the modules back
            package = self.get_finalized_command("build_py").get_package_dir("pyipu")
            self.copy_file(self.libipu, os.path.join(package, "libipu.so"))

    def build_extensions(self) -> None:
        libdir = os.path.dirname(self.get_ext_fullpath("pyipu._core"))
        self.libipu = os.path.join(libdir, "libipu.so")
        os.makedirs(libdir, exist_ok=True)
        objects = self.compiler.compile(
            core_sources(),
            output_dir=self.build_temp,
            macros=[("_GNU_SOURCE", None)],
            include_dirs=INCLUDE,
            # only the IPU_API and IPU_EXTENSION_API functions are exported, as with meson
            extra_postargs=[*C_FLAGS, "-fvisibility=hidden"],
        )
        self.compiler.link_shared_object(
            objects,
            "libipu.so",
            output_dir=libdir,
            libraries=["m", "pthread"],
            extra_postargs=["-Wl,-soname,libipu.so"],
        )
        for ext in self.extensions:
            ext.library_dirs.append(libdir)
        super().build_extensions()


extensions = [
    Extension(
        f"pyipu.{name}",
        sources=[f"pyipu/{name}.pyx"],
        include_dirs=[*INCLUDE, numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=[*C_FLAGS, "-Wno-unused-function"],
        libraries=["ipu"],
        runtime_library_dirs=["$ORIGIN"],  # libipu.so, installed beside the modules
    )
    for name in ("_core", "_session", "_fast_path")
]

setup(
    name="pyipu",
    version=(ROOT / "VERSION").read_text().strip(),
    # every package under pyipu/ (the tree is the list), and the magics installed inside it
    packages=[*find_packages(include=["pyipu", "pyipu.*"]), "pyipu.magics"],
    package_dir={"pyipu.magics": "magics"},
    package_data={"pyipu": ["py.typed", "*.pyi"]},
    ext_modules=cythonize(extensions, language_level=3),
    cmdclass={"build_ext": BuildWithLibipu},
    install_requires=["numpy>=1.25", "onnx>=1.15", "pyyaml>=6"],
    entry_points={
        "console_scripts": [
            "pyipu = pyipu.cli.main:main",
            "popef_dump = pyipu.cli.popef_dump:main",
            "pyipu-demo = pyipu.demo:main",
        ]
    },
)
