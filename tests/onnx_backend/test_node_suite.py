"""ONNX backend conformance: onnx.backend.test.BackendTest driven through pyipu.backend.

Node tests (generated in memory by onnx 1.23) plus the packaged simple, pytorch-converted,
pytorch-operator and light ("Real" category) model tests. Exclusions (see onnx_suite.py):
`_cuda` variants; tests whose model uses an op pyipu.compiler.ops.REGISTRY lacks (computed, so
new ops are picked up automatically); and the failing tests listed in known_failures.txt.
Regenerate the report with `python tools/onnx_support.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx.backend.test

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx_suite  # noqa: E402

import pyipu.backend  # noqa: E402
from pyipu.compiler.ops import REGISTRY  # noqa: E402

backend_test = onnx.backend.test.BackendTest(pyipu.backend, __name__)

_cases, _known = onnx_suite.classify(REGISTRY)
EXCLUSIONS = onnx_suite.exclusion_patterns(_cases, _known)
for _pattern in EXCLUSIONS:
    backend_test.exclude(_pattern)

globals().update(backend_test.enable_report().test_cases)
