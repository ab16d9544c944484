"""PopRT's compiler API: `from pyipu.compiler import Compiler, CompilerOptions`."""

from pyipu.compiler.compiler import Compiler
from pyipu.compiler.errors import (
    CompileError,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
    UnsupportedError,
    UnsupportedOpError,
)
from pyipu.compiler.executable import Executable
from pyipu.compiler.fusion import MFConverter, fuse_models
from pyipu.compiler.options import CompilerOptions

__all__ = [
    "CompileError",
    "Compiler",
    "CompilerOptions",
    "Executable",
    "MFConverter",
    "ShapeError",
    "UnsupportedAttributeError",
    "UnsupportedDTypeError",
    "UnsupportedError",
    "UnsupportedOpError",
    "fuse_models",
]
