"""pyipu: Graphcore's IPU inference stack (PopRT, Model Runtime, PopEF, IPU Model) on the CPU.

A script written for PopRT runs after replacing `poprt` with `pyipu`:

    from pyipu import runtime
    from pyipu.compiler import Compiler, CompilerOptions
"""

from pyipu.errors import Error, RecoverableError, UnrecoverableError

__version__ = "0.1.0"

__all__ = ["Error", "RecoverableError", "UnrecoverableError", "__version__"]
