"""The hand-made corpus of malformed containers (tests/fuzz/malformed/, written by
tests/fuzz/make_malformed.py): each file breaks one rule of the format and must fail with ITS
error (exception class and message), and every truncation of a valid file must fail cleanly.

Everything is loaded in a child process, so a crash (signal) fails the test instead of killing
pytest; the child reports each outcome as JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyipu import errors

FUZZ = Path(__file__).resolve().parent / "fuzz"
MALFORMED = FUZZ / "malformed"

# Load each path both ways: memory-mapped file and in-memory copy.
_CHILD = r"""
import json, sys
from pyipu import _core

def outcome(load):
    try:
        _core.Executable(load())
        return ["OK", ""]
    except Exception as e:  # the parent checks the class
        return [type(e).__module__ + "." + type(e).__name__, str(e)]

out = {}
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    out[path] = [outcome(lambda: _core.Container.open(path)),
                 outcome(lambda: _core.Container.from_bytes(data))]
print(json.dumps(out))
"""

_TRUNCATE_CHILD = r"""
import json, sys
from pyipu import _core
data = open(sys.argv[1], "rb").read()
fixup = sys.argv[2] == "fixup"
if fixup:
    sys.path.insert(0, sys.argv[3])
    from make_malformed import header_checksum
seen = {}
for n in range(len(data)):
    b = bytearray(data[:n])
    if fixup and n >= 64:
        b[16:24] = n.to_bytes(8, "little")
        b[32:40] = header_checksum(bytes(b)).to_bytes(8, "little")
    try:
        _core.Executable(_core.Container.from_bytes(bytes(b)))
        key = ("OK", "")
    except Exception as e:
        key = (type(e).__module__ + "." + type(e).__name__, str(e))
    seen.setdefault(repr(key[0]), []).append([n, key[1]])
print(json.dumps(seen))
"""


def _run_child(code: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    # A negative return code is a signal: the loader crashed.
    assert proc.returncode == 0, f"child exited {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def _expected() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (MALFORMED / "expected.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        name, exc, regex = line.split("\t")
        rows[name] = (exc, regex)
    return rows


def test_manifest_lists_exactly_the_corpus() -> None:
    files = {p.name for p in MALFORMED.glob("*.bin")}
    assert files == set(_expected()), "rerun tests/fuzz/make_malformed.py"
    assert len(files) >= 60


def test_each_malformed_container_gives_its_specific_error() -> None:
    expected = _expected()
    paths = [str(MALFORMED / name) for name in sorted(expected)]
    results = _run_child(_CHILD, *paths)
    wrong = []
    for path in paths:
        exc, regex = expected[Path(path).name]
        cls = getattr(errors, exc)
        for (got, msg), how in zip(results[path], ("open", "from_bytes"), strict=True):
            if got != f"{cls.__module__}.{cls.__name__}" or not re.search(regex, msg):
                wrong.append(f"{Path(path).name} ({how}): {got}: {msg!r}, expected {exc} /{regex}/")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("seed", ["conv", "sharded_pipelined"])
def test_truncation_at_every_byte(seed: str) -> None:
    """Each prefix fails with the header check that catches it."""
    path = FUZZ / "corpus" / "container" / f"{seed}.bin"
    size = path.stat().st_size
    seen = _run_child(_TRUNCATE_CHILD, str(path), "plain")
    assert set(seen) == {repr("pyipu.errors.CorruptFileError")}, seen.keys()
    cases = seen[repr("pyipu.errors.CorruptFileError")]
    assert len(cases) == size
    for n, msg in cases:
        if n < 64:
            assert "smaller than the 64-byte header" in msg, (n, msg)
        else:
            assert f"file_size {size} differs from the actual size {n}" in msg, (n, msg)


def test_truncation_with_fixed_header_at_every_byte() -> None:
    """With file_size and checksum recomputed, each prefix still fails as corrupt (blob table
    or a blob past the end), never OK, never an untyped error."""
    path = FUZZ / "corpus" / "container" / "scale.bin"
    seen = _run_child(_TRUNCATE_CHILD, str(path), "fixup", str(FUZZ))
    allowed = {repr(f"pyipu.errors.{c}") for c in ("CorruptFileError", "BadProgramError")}
    assert set(seen) <= allowed, {k: v[:2] for k, v in seen.items() if k not in allowed}
    assert sum(len(v) for v in seen.values()) == path.stat().st_size
    msgs = [msg for v in seen.values() for n, msg in v if n >= 64]
    assert not [m for m in msgs if "checksum" in m or "file_size" in m]  # the fix-up worked
    assert any("exceeds file size" in m for m in msgs)  # cuts reach the blob table checks


def _stored_packed_file() -> bytes:
    """A compiled model whose two MatMul weights are stored only packed."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from pyipu.compiler import Compiler

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 48), np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((48, 16), np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "stored",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return Compiler.compile(model).to_bytes()


def test_broken_entry_of_a_weight_stored_packed_is_a_corrupt_file(tmp_path) -> None:
    """Its packed entry is the only copy of the weight: a blob cut short, an entry whose size
    or source shape is off, or no entry at all is a CorruptFileError (checksum valid), never a
    weight packed at load from nothing."""
    import struct

    from pyipu import _core
    from pyipu.compiler.serialize import PACKED_BLOB, split_container, stored_packed

    data = _stored_packed_file()
    blobs = split_container(data)
    assert len(stored_packed(blobs)) == 2
    (i,) = [k for k, b in enumerate(blobs) if b[2] == PACKED_BLOB]

    def with_payload(edit) -> bytes:
        edited = list(blobs)
        t, bid, name, payload = edited[i]
        edited[i] = (t, bid, name, bytes(edit(bytearray(payload))))
        return bytes(_core.write_container(edited))

    def entry(p: bytearray, off: int, fmt: str, delta: int) -> bytearray:
        at = 16 + off
        struct.pack_into(fmt, p, at, struct.unpack_from(fmt, p, at)[0] + delta)
        return p

    cases = {
        "short": (with_payload(lambda p: p[: len(p) - 64]), "exceed the blob"),
        "size": (with_payload(lambda p: entry(p, 56, "<Q", -64)), "not its geometry"),
        "rows": (with_payload(lambda p: entry(p, 72, "<Q", 1)), "not the tensor's"),
        "gone": (bytes(_core.write_container(blobs[:i] + blobs[i + 1 :])), "no packed blob entry"),
    }
    paths = []
    for name, (image, _) in cases.items():
        (tmp_path / f"{name}.bin").write_bytes(image)
        paths.append(str(tmp_path / f"{name}.bin"))
    results = _run_child(_CHILD, *paths)
    for path, (name, (_, regex)) in zip(paths, cases.items(), strict=True):
        for got, msg in results[path]:
            assert got == "pyipu.errors.CorruptFileError" and re.search(regex, msg), (name, msg)
