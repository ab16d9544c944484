"""pyipu: Graphcore's IPU inference stack (PopRT, Model Runtime, PopEF, IPU Model) on the CPU.

A script written for PopRT runs after replacing `poprt` with `pyipu`:

    from pyipu import runtime
    from pyipu.compiler import Compiler, CompilerOptions
    model = pyipu.Converter(precision="fp16").convert(onnx_model)
"""

from importlib import metadata as _metadata
from pathlib import Path as _Path

from pyipu.errors import Error, RecoverableError, UnrecoverableError


def _version() -> str:
    """The VERSION file's: beside the package in a source tree (an in-place build), else the
    installed metadata's, which the build took from it."""
    root = _Path(__file__).resolve().parent.parent
    if (root / "meson.build").is_file() and (root / "VERSION").is_file():
        return (root / "VERSION").read_text().strip()
    return _metadata.version("pyipu")


__version__ = _version()

__all__ = [
    "Converter",
    "Error",
    "Pass",
    "PassManager",
    "RecoverableError",
    "UnrecoverableError",
    "__version__",
    "get_registered_passes",
    "passes",
    "supported_ops",
]

# Imported on first use, so `import pyipu` stays light (no onnx import).
_LAZY = {
    "Converter": ("pyipu.converter", "Converter"),
    "Pass": ("pyipu.passes", "Pass"),
    "PassManager": ("pyipu.passes", "PassManager"),
    "get_registered_passes": ("pyipu.passes", "get_registered_passes"),
    "passes": ("pyipu.passes", None),
    "supported_ops": ("pyipu.compiler.op_support", "supported_ops"),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'pyipu' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attr is None else getattr(module, attr)
