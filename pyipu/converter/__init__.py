"""PopRT's converter (`poprt.converter`): `Converter` (one model) and `MFConverter` (fusion)."""

from pyipu.compiler.fusion import MFConverter
from pyipu.converter.check import CheckResult, compare_models
from pyipu.converter.converter import DEFAULT_PASSES, Converter, parse_input_shape

__all__ = [
    "DEFAULT_PASSES",
    "CheckResult",
    "Converter",
    "MFConverter",
    "compare_models",
    "parse_input_shape",
]
