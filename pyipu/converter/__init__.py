"""PopRT's converter (`poprt.converter`): `Converter` (one model), `MFConverter` (fusion) and
`Sharder` (manual sharding / pipelining)."""

from pyipu.compiler.model_fusion import MFConverter
from pyipu.compiler.sharding import Sharder
from pyipu.converter.check import CheckResult, compare_models
from pyipu.converter.converter import DEFAULT_PASSES, Converter, parse_input_shape

__all__ = [
    "DEFAULT_PASSES",
    "CheckResult",
    "Converter",
    "MFConverter",
    "Sharder",
    "compare_models",
    "parse_input_shape",
]
