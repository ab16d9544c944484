"""Property-based fuzzing of the Python entry points with hypothesis: compiling mutated ONNX
models and loading mutated PopEF images raise only pyipu.Error subclasses (never an untyped
exception, a hang or a crash).

Bounded here (derandomized, PYIPU_FUZZ_EXAMPLES examples per test, default 300); .ci/fuzz.sh
runs the coverage-guided atheris version, tests/fuzz/fuzz_python.py, for longer."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import models
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyipu
from pyipu.compiler import Compiler
from pyipu.compiler.errors import CompileError, UnsupportedAttributeError
from pyipu.compiler.executable import Executable
from pyipu.errors import CorruptFileError, VersionError

FUZZ = Path(__file__).resolve().parent / "fuzz"
sys.path.insert(0, str(FUZZ))
from entry_points import compile_onnx, load_popef  # noqa: E402
from make_malformed import header_checksum  # noqa: E402

EXAMPLES = int(os.environ.get("PYIPU_FUZZ_EXAMPLES", "300"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ONNX_SEEDS = [
    models.fusion_model0().SerializeToString(),
    models.fusion_model1().SerializeToString(),
    models.scale_model().SerializeToString(),
]
POPEF_SEEDS = [
    (FUZZ / "corpus" / "container" / f"{name}.bin").read_bytes()
    for name in ("scale", "gather", "conv", "topk", "fused", "variables")
]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few byte edits: overwrite, insert, delete, truncate."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["set", "insert", "delete", "truncate", "u32"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "u32" and len(data) >= 4:
            pos = min(pos, len(data) - 4)
            value = draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]))
            data[pos : pos + 4] = value.to_bytes(4, "little")
    return bytes(data)


def fix_header(data: bytes) -> bytes:
    """The image with file_size and checksum recomputed, so edits reach the blobs."""
    if len(data) < 64:
        return data
    b = bytearray(data)
    b[16:24] = len(b).to_bytes(8, "little")
    b[32:40] = header_checksum(bytes(b)).to_bytes(8, "little")
    return bytes(b)


@FUZZ_SETTINGS
@given(data=mutated(ONNX_SEEDS))
def test_compiling_mutated_onnx_raises_only_pyipu_errors(data: bytes) -> None:
    compile_onnx(data)


@FUZZ_SETTINGS
@given(data=mutated(POPEF_SEEDS), fix=st.booleans())
def test_loading_mutated_popef_raises_only_pyipu_errors(
    data: bytes, fix: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    load_popef(fix_header(data) if fix else data, tmp_path_factory.getbasetemp() / "x.popef")


# ---- regressions: each input class the fuzzers found, as a direct test


def _patched_onnx(old: bytes, new: bytes, model: onnx.ModelProto | None = None) -> bytes:
    data = (model or models.fusion_model0()).SerializeToString()
    assert data.count(old) == 1
    return data.replace(old, new)


def test_initializer_with_wrong_data_size_is_a_compile_error() -> None:
    m = models.fusion_model0()
    m.graph.initializer[0].raw_data = b"\x01\x00"  # 2 bytes for one int64
    with pytest.raises(CompileError, match="initializer 'C' is malformed"):
        Compiler.compile(m)


def test_initializer_with_undefined_type_is_a_compile_error() -> None:
    m = models.fusion_model0()
    m.graph.initializer[0].data_type = onnx.TensorProto.UNDEFINED
    with pytest.raises(CompileError, match="initializer 'C' is malformed"):
        Compiler.compile(m)


def test_output_declared_with_an_unknown_element_type() -> None:
    m = models.fusion_model0()
    m.graph.output[0].type.tensor_type.elem_type = 109
    with pytest.raises(pyipu.Error, match="element type 109"):
        Compiler.compile(m.SerializeToString())


def test_attribute_of_the_wrong_type_is_rejected() -> None:
    m = models.fusion_model1()
    attr = m.graph.node[0].attribute[0]  # Concat axis (INT)
    attr.type = onnx.AttributeProto.STRING
    attr.s = b"1"
    with pytest.raises(UnsupportedAttributeError, match="has type STRING, the schema says INT"):
        Compiler.compile(m)


def test_node_with_too_few_inputs_is_a_compile_error() -> None:
    m = models.fusion_model0()
    del m.graph.node[0].input[1]  # Add(X)
    with pytest.raises(CompileError, match="input 1 is required"):
        Compiler.compile(m.SerializeToString())


def test_op_type_that_is_not_utf8_is_a_compile_error() -> None:
    data = _patched_onnx(b'"\x03Add', b'"\x03\xffdd')
    with pytest.raises(CompileError, match="not valid UTF-8"):
        Compiler.compile(data)


def test_python_decoder_raises_corrupt_file_errors() -> None:
    image = bytearray(POPEF_SEEDS[0])  # scale: anchor names in the metadata string table
    at = bytes(image).index(b"XtwooneY")
    image[at] = 0xFF
    with pytest.raises(CorruptFileError, match="not valid UTF-8"):
        Executable.from_bytes(bytes(image)).program  # noqa: B018
    with pytest.raises(CorruptFileError, match="container says"):
        Executable.from_bytes(POPEF_SEEDS[0][:-1]).program  # noqa: B018
    with pytest.raises(VersionError):
        Executable.from_bytes(POPEF_SEEDS[0][:8] + b"\x07" + POPEF_SEEDS[0][9:]).program  # noqa: B018


REGRESSIONS = sorted((FUZZ / "regressions" / "onnx").glob("*.onnx")) + sorted(
    (FUZZ / "regressions" / "popef").glob("*.popef")
)


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_regression_inputs(path: Path, tmp_path: Path) -> None:
    """Every input a Python-level fuzzer found (tests/fuzz/regressions/{onnx,popef}/)."""
    if path.suffix == ".onnx":
        compile_onnx(path.read_bytes())
    else:
        load_popef(path.read_bytes(), tmp_path / "x.popef")
