"""Fallback build with setuptools + Cython, for environments without meson.

meson.build is the authoritative build (pip install . uses it through meson-python). This file
compiles the same extension from the same C source list (runtime_c/sources.txt), e.g.:
    python setup.py build_ext --inplace
"""

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).parent


def core_sources() -> list[str]:
    lines = (ROOT / "runtime_c" / "sources.txt").read_text().splitlines()
    return [f"runtime_c/{s.strip()}" for s in lines if s.strip() and not s.startswith("#")]


extension = Extension(
    "pyipu._core",
    sources=["pyipu/_core.pyx", *core_sources()],
    include_dirs=["runtime_c/include", "runtime_c/include/ipu", numpy.get_include()],
    define_macros=[("_GNU_SOURCE", None), ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-std=c11", "-O3", "-Wall", "-Wextra", "-Wno-unused-function"],
    libraries=["m", "pthread"],
)

setup(
    name="pyipu",
    version="0.1.0",
    packages=[
        "pyipu",
        "pyipu.cli",
        "pyipu.compiler",
        "pyipu.compiler.ipu_model",
        "pyipu.compiler.rewrites",
        "pyipu.converter",
        "pyipu.model_runtime",
        "pyipu.passes",
        "pyipu.reference",
        "pyipu.runtime",
        "pyipu.magics",
    ],
    package_dir={"pyipu.magics": "magics"},
    package_data={"pyipu": ["py.typed"]},
    ext_modules=cythonize([extension], language_level=3),
    install_requires=["numpy>=1.25", "onnx>=1.15", "pyyaml>=6"],
    entry_points={
        "console_scripts": [
            "pyipu = pyipu.cli.main:main",
            "popef_dump = pyipu.cli.popef_dump:main",
            "pyipu-demo = pyipu.demo:main",
        ]
    },
)
