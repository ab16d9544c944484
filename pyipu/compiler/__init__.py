"""PopRT's compiler API: `from pyipu.compiler import Compiler, CompilerOptions`."""

from pyipu.compiler.compiler import Compiler
from pyipu.compiler.errors import (
    CompileError,
    IPUOutOfMemoryError,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
    UnsupportedError,
    UnsupportedOpError,
)
from pyipu.compiler.executable import Executable
from pyipu.compiler.float64 import float64_to_float32
from pyipu.compiler.ipu_model import IPUModelReport
from pyipu.compiler.model_fusion import MFConverter, fuse_models
from pyipu.compiler.options import CompilerOptions

__all__ = [
    "CompileError",
    "Compiler",
    "CompilerOptions",
    "Executable",
    "IPUModelReport",
    "IPUOutOfMemoryError",
    "MFConverter",
    "ShapeError",
    "UnsupportedAttributeError",
    "UnsupportedDTypeError",
    "UnsupportedError",
    "UnsupportedOpError",
    "float64_to_float32",
    "fuse_models",
]
