"""PopRT's passes (`poprt.passes`): the registry and the built-in ONNX → ONNX passes.

    >>> import pyipu
    >>> sorted(pyipu.get_registered_passes())[:3]
    ['const_input_shape', 'constant_folding', 'eliminate_dropout']
    >>> pm = pyipu.PassManager(["eliminate_identity", "constant_folding"])
    >>> model = pm.run(model)  # doctest: +SKIP

See docs/converter.md for what each pass does and how to write one.
"""

from pyipu.passes import eliminate, folding, fuse, half, int64, overview, sharding
from pyipu.passes.base import (
    Pass,
    PassManager,
    get_registered_passes,
    get_typed_registered_passes,
    register,
)
from pyipu.passes.errors import (
    Int64OverflowError,
    PassConstraintError,
    PassError,
    PassRegistrationError,
    UnknownPassError,
)

__all__ = [
    "Int64OverflowError",
    "Pass",
    "PassConstraintError",
    "PassError",
    "PassManager",
    "PassRegistrationError",
    "UnknownPassError",
    "eliminate",
    "folding",
    "fuse",
    "get_registered_passes",
    "get_typed_registered_passes",
    "half",
    "int64",
    "overview",
    "register",
    "sharding",
]
