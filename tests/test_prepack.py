"""Operands pre-packed at compile time (docs/popef.md, "Pre-packed operands"): the PopEF carries
the convolution weights already in the sgemm panel layout, the loader maps them instead of
packing, and anything that does not match (another micro-kernel, a different key) is packed at
load as before. A weight whose one use is such an operand is stored only packed (its bytes leave
TENSOR_DATA) and unpacked exactly where its values are needed. A malformed packed blob is a
CorruptFileError."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import arr, assert_matches_reference, run_c
from onnx import TensorProto, helper, numpy_helper

from pyipu import _core, errors
from pyipu.compiler import CompileError, Compiler, CompilerOptions, Executable
from pyipu.compiler.serialize import (
    BLOB_OPAQUE,
    PACKED_BLOB,
    TENSOR_STORED_PACKED,
    decode,
    encode_container,
    split_container,
    stored_packed,
)
from pyipu.model_runtime import AnchorCallbackPolicy, Session

F32 = np.float32
HEAD, ENTRY = 16, 96  # packed blob header and entry sizes (prepack.c)


def _float_model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    inits: list[onnx.TensorProto],
) -> onnx.ModelProto:
    """An opset-13, IR-8 model of float32 inputs (name → shape) and one output y."""
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


W1 = (120, 4, 3, 3)


def _model() -> onnx.ModelProto:
    """x[1,8,10,10] → grouped Conv 3x3 (group 2, 120 channels: not Winograd) → Relu → grouped
    Conv 1x1 (group 2, 24 channels) → y; weights w1, w2 and bias b1 in the PopEF, w1 and w2
    stored only packed (A panels)."""
    inits = [
        numpy_helper.from_array(arr(W1, F32, 1, low=-0.3, high=0.3), "w1"),
        numpy_helper.from_array(arr((120,), F32, 2), "b1"),
        numpy_helper.from_array(arr((24, 60, 1, 1), F32, 3, low=-0.3, high=0.3), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1] * 4, group=2),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], group=2),
    ]
    return _float_model("two_convs", nodes, {"x": [1, 8, 10, 10]}, inits)


FEEDS = {"x": arr((1, 8, 10, 10), F32, 4, low=-1, high=1)}


@pytest.fixture(scope="module")
def exe() -> Executable:
    return Compiler.compile(_model())


@pytest.fixture(autouse=True)
def auto_isa() -> Iterator[None]:
    yield
    _core.set_isa(0)


def auto_sgemm_isa() -> int:
    """The sgemm micro-kernel's level once no level is forced."""
    _core.set_isa(0)
    return _core.sgemm_isa()


def counts(data: bytes) -> tuple[int, int]:
    """(mapped from the packed blob, packed at load) of a container image."""
    return Executable.from_bytes(data).native().packed_counts()


def run(data: bytes) -> np.ndarray:
    return run_c(Executable.from_bytes(data), FEEDS)["y"]


def run_bound(
    data: bytes, feeds: dict[str, np.ndarray], weights: dict[str, np.ndarray], y_shape: tuple
) -> np.ndarray:
    """The main program's y with `weights` bound by the session in place of the PopEF's."""

    def policy(anchor):
        if not anchor.popef_contains_tensor_data or anchor.name in weights:
            return AnchorCallbackPolicy.BIND_USER_CB
        return AnchorCallbackPolicy.BIND_TENSOR_DATA

    with Session(Executable.from_bytes(data)) as session:
        qm = session.create_queue_manager(input_predicate=policy)
        for name, w in weights.items():
            qm.input_queue(name).enqueue(w)
        session.run_load_programs()
        y = np.zeros(y_shape, F32)
        for name, value in feeds.items():
            qm.input_queue(name).enqueue(value)
        qm.output_queue("y").enqueue(y)
        session.run_main_programs()
    return y


def patched(data: bytes, edit: Callable[[bytearray], bytes | bytearray]) -> bytes:
    """The image with its packed blob's payload replaced by edit(payload) (checksum valid)."""
    blobs = split_container(data)
    (i,) = [k for k, b in enumerate(blobs) if b[0] == BLOB_OPAQUE and b[2] == PACKED_BLOB]
    t, bid, name, payload = blobs[i]
    blobs[i] = (t, bid, name, bytes(edit(bytearray(payload))))
    return bytes(_core.write_container(blobs))


def entry_field(p: bytearray, entry: int, offset: int, fmt: str, value: int) -> bytearray:
    struct.pack_into(fmt, p, HEAD + entry * ENTRY + offset, value)
    return p


def field(p: bytearray, entry: int, offset: int, fmt: str) -> int:
    return struct.unpack_from(fmt, p, HEAD + entry * ENTRY + offset)[0]


def test_blob_name_is_the_c_constant() -> None:
    assert PACKED_BLOB == _core.PACKED_BLOB_NAME


def test_compiled_file_carries_the_packed_weights(exe: Executable) -> None:
    data = exe.to_bytes()
    names = [b[2] for b in split_container(data) if b[0] == BLOB_OPAQUE]
    assert names.count(PACKED_BLOB) == 1
    assert counts(data) == (2, 0)
    bare = encode_container(exe.program, prepack=False)
    assert PACKED_BLOB not in [b[2] for b in split_container(bare)]
    assert counts(bare) == (0, 2)  # an older file: packed at load


def test_mapped_and_packed_at_load_give_identical_results(exe: Executable) -> None:
    mapped = run(exe.to_bytes())
    np.testing.assert_array_equal(mapped, run(encode_container(exe.program, prepack=False)))
    assert_matches_reference({"y": mapped}, exe.run_reference(FEEDS))


def test_kernels_read_the_mapped_bytes(exe: Executable) -> None:
    """Zeroing the packed copy of w1 (the file's w1 itself untouched) zeroes the first conv."""

    def zero_w1(p: bytearray) -> bytearray:
        off, size = field(p, 0, 48, "<Q"), field(p, 0, 56, "<Q")
        p[off : off + size] = bytes(size)
        return p

    data = patched(exe.to_bytes(), zero_w1)
    assert counts(data) == (2, 0)
    model = _model()
    w1 = numpy_helper.to_array(model.graph.initializer[0])
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros_like(w1), "w1"))
    want = Compiler.compile(model).run_reference(FEEDS)
    assert_matches_reference({"y": run(data)}, want)


def test_decoded_program_drops_the_blob_and_reencodes_the_same_file(exe: Executable) -> None:
    data = exe.to_bytes()
    program = Executable.from_bytes(data).program
    assert PACKED_BLOB not in [name for name, _ in program.opaque]
    assert encode_container(program) == data


def test_packed_for_another_isa_is_packed_at_load(exe: Executable) -> None:
    if auto_sgemm_isa() == 1:
        pytest.skip("only the portable micro-kernel on this CPU")
    _core.set_isa(1)  # the portable micro-kernel tags its layout ISA 1
    portable = encode_container(exe.program)
    _core.set_isa(0)
    assert counts(portable) == (0, 2)
    native = exe.to_bytes()
    np.testing.assert_array_equal(run(portable), run(native))


def test_file_packed_for_avx512_is_packed_at_load_on_another_cpu(exe: Executable) -> None:
    """Tags say ISA 3 (AVX-512): unless this CPU runs that micro-kernel, nothing matches and the
    weights, stored only packed, are unpacked and packed again at load."""
    if auto_sgemm_isa() == 3:
        pytest.skip("this CPU runs the AVX-512 micro-kernel")

    def avx512(p: bytearray) -> bytearray:
        for e in range(struct.unpack_from("<I", p, 12)[0]):
            entry_field(p, e, 20, "<I", 3)
        return p

    data = patched(exe.to_bytes(), avx512)
    assert counts(data) == (0, 2)
    np.testing.assert_array_equal(run(data), run(exe.to_bytes()))


def test_entry_under_another_key_is_unpacked_and_packed_at_load(exe: Executable) -> None:
    data = patched(exe.to_bytes(), lambda p: entry_field(p, 0, 4, "<I", 999))
    assert counts(data) == (1, 1)
    np.testing.assert_array_equal(run(data), run(exe.to_bytes()))


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda p: struct.pack_into("<I", p, 8, 99) or p, "no packed blob entry holds it"),
        (lambda p: entry_field(p, 0, 16, "<I", 7), "cannot be unpacked exactly"),
        (lambda p: entry_field(p, 1, 56, "<Q", field(p, 1, 56, "<Q") - 64), "not its geometry"),
        (lambda p: entry_field(p, 1, 72, "<Q", field(p, 1, 72, "<Q") + 1), "not the tensor's"),
        (lambda p: entry_field(p, 1, 40, "<I", 0), "no packed blob entry holds it"),
    ],
    ids=["blob_version", "layout_version", "size", "shape", "tensor"],
)
def test_weights_stored_packed_need_their_entry(exe: Executable, edit, message: str) -> None:
    """Nothing else holds a weight stored packed: an entry that is gone, of an unknown version
    or with a shape that is not the tensor's is a CorruptFileError, never packed at load."""
    data = patched(exe.to_bytes(), edit)
    with pytest.raises(errors.CorruptFileError, match=message):
        Executable.from_bytes(data).native()
    with pytest.raises(errors.CorruptFileError):
        decode(data)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda p: b"NOTPACK\0" + p[8:], "without the PYIPUPK header"),
        (lambda p: p[:8], "without the PYIPUPK header"),
        (lambda p: struct.pack_into("<I", p, 12, 10**6) or p, "do not fit"),
        (lambda p: p[: len(p) // 2], "exceed the blob"),  # truncated
        (lambda p: entry_field(p, 0, 48, "<Q", 2**64 - 8), "exceed the blob"),
        (lambda p: entry_field(p, 0, 48, "<Q", 8), "overlaps the entry table"),
        (lambda p: entry_field(p, 0, 48, "<Q", field(p, 0, 48, "<Q") + 4), "aligned"),
        (lambda p: entry_field(p, 0, 88, "<Q", 1), "reserved"),
        (lambda p: entry_field(p, 1, 4, "<I", field(p, 0, 4, "<I")), "two entries"),
    ],
    ids=[
        "magic",
        "short",
        "count",
        "truncated",
        "offset_wraps",
        "overlap",
        "aligned",
        "reserved",
        "duplicate",
    ],
)
def test_malformed_blob_is_a_corrupt_file(exe: Executable, edit, message: str) -> None:
    data = patched(exe.to_bytes(), edit)
    with pytest.raises(errors.CorruptFileError, match=f"packed blob.*{message}"):
        Executable.from_bytes(data).native()


def test_flipped_packed_byte_fails_the_checksum(exe: Executable) -> None:
    data = bytearray(exe.to_bytes())
    data[-100] ^= 0x40  # the last blob is the packed one
    with pytest.raises(errors.CorruptFileError, match="checksum"):
        Executable.from_bytes(bytes(data)).native()


def test_second_packed_blob_is_a_corrupt_file(exe: Executable) -> None:
    blobs = split_container(exe.to_bytes())
    blobs += [b for b in blobs if b[2] == PACKED_BLOB]
    # OPAQUE names are unique: the writer refuses, the reader rejects a hand-made file.
    with pytest.raises(errors.InvalidArgumentError, match='duplicate OPAQUE name "pyipu.packed"'):
        _core.write_container(blobs)
    hand_made = Path(__file__).parent / "fuzz" / "malformed" / "duplicate_opaque_name.bin"
    with pytest.raises(errors.CorruptFileError, match='both OPAQUE "pyipu.packed"'):
        Executable.from_bytes(hand_made.read_bytes()).native()


def test_session_weights_override_the_packed_ones(exe: Executable) -> None:
    w1 = arr(W1, F32, 9, low=-0.3, high=0.3)
    model = _model()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w1, "w1"))
    want = Compiler.compile(model).run_reference(FEEDS)
    got = run_bound(exe.to_bytes(), FEEDS, {"w1": w1}, (1, 24, 10, 10))
    assert_matches_reference({"y": got}, want)
    np.testing.assert_array_equal(
        run_bound(exe.to_bytes(), FEEDS, {}, (1, 24, 10, 10)), run(exe.to_bytes())
    )


def test_engine_cache_hit_maps_the_packed_weights(tmp_path) -> None:
    opts = CompilerOptions.from_dict({"enable_engine_caching": True, "cache_path": str(tmp_path)})
    first = Compiler.compile(_model(), None, opts)
    hit = Compiler.compile(_model(), None, opts)
    assert hit.native().packed_counts() == (2, 0)
    np.testing.assert_array_equal(run_c(hit, FEEDS)["y"], run_c(first, FEEDS)["y"])


def test_user_blob_cannot_take_the_reserved_name() -> None:
    with pytest.raises(CompileError, match="reserved"):
        CompilerOptions.from_dict({"opaque_blobs": {PACKED_BLOB: b"x"}})


def test_popef_dump_reports_the_packed_operands(exe: Executable, tmp_path) -> None:
    import io

    from pyipu.cli.popef_dump import dump

    exe.save(tmp_path / "m.popef")
    out = io.StringIO()
    dump(str(tmp_path / "m.popef"), out)
    assert "name='pyipu.packed'" in out.getvalue()
    assert "Packed operands: 2 mapped from the file, 0 packed at load" in out.getvalue()


def _fc_model() -> onnx.ModelProto:
    """x[16,48] → Gemm (transB, bias) → Relu → MatMul → y: both weights are float32 B operands
    that MATMUL/GEMM pack once (ipu__mm_pack_b), so the PopEF carries them packed too."""
    inits = [
        numpy_helper.from_array(arr((40, 48), F32, 5, low=-0.3, high=0.3), "w1"),
        numpy_helper.from_array(arr((40,), F32, 6), "b1"),
        numpy_helper.from_array(arr((40, 24), F32, 7, low=-0.3, high=0.3), "w2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    return _float_model("fc", nodes, {"x": [16, 48]}, inits)


def test_matmul_and_gemm_weights_are_carried_packed() -> None:
    fc = Compiler.compile(_fc_model())
    feeds = {"x": arr((16, 48), F32, 8, low=-1, high=1)}
    data = fc.to_bytes()
    assert counts(data) == (2, 0)
    assert counts(encode_container(fc.program, prepack=False)) == (0, 2)
    got = run_c(Executable.from_bytes(data), feeds)["y"]
    assert_matches_reference({"y": got}, fc.run_reference(feeds))
    _core.set_isa(1)  # portable micro-kernel: other panel width, packed at load
    assert counts(data) == (0, 2)
    portable = run_c(Executable.from_bytes(data), feeds)["y"]
    assert_matches_reference({"y": portable}, fc.run_reference(feeds))


def _small_map_model() -> onnx.ModelProto:
    """x[1,64,14,14] → Conv 3x3 stride 2 (128 channels: a 7x7 map) → Relu → Conv 1x1 (256
    channels) + z (residual) → Relu → y: on a 7x7 map both convolutions take the small-map
    path (output pixels as the micro-kernel's rows, weights packed transposed: layout 2)."""
    inits = [
        numpy_helper.from_array(arr((128, 64, 3, 3), F32, 11, low=-0.1, high=0.1), "w1"),
        numpy_helper.from_array(arr((128,), F32, 12), "b1"),
        numpy_helper.from_array(arr((256, 128, 1, 1), F32, 13, low=-0.1, high=0.1), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1] * 4, strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["d"]),
        helper.make_node("Add", ["d", "z"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inputs = {"x": [1, 64, 14, 14], "z": [1, 256, 7, 7]}
    return _float_model("small_map", nodes, inputs, inits)


SMALL_FEEDS = {
    "x": arr((1, 64, 14, 14), F32, 14, low=-1, high=1),
    "z": arr((1, 256, 7, 7), F32, 15, low=-1, high=1),
}


def test_small_map_convolutions_carry_transposed_weights() -> None:
    """The small-map path's weights travel packed as B panels (layout 2) and give the same
    bytes mapped, packed at load, or (weights bound by the session) through the other paths."""
    exe = Compiler.compile(_small_map_model())
    data = exe.to_bytes()
    assert counts(data) == (2, 0)
    if auto_sgemm_isa() in (2, 3):  # AVX2 / AVX-512 (the portable kernel may not pick it)
        (payload,) = [b[3] for b in split_container(data) if b[2] == PACKED_BLOB]
        n = struct.unpack_from("<I", payload, 12)[0]
        assert [field(bytearray(payload), e, 12, "<I") for e in range(n)] == [2, 2]
    got = run_c(Executable.from_bytes(data), SMALL_FEEDS)["y"]
    assert_matches_reference({"y": got}, exe.run_reference(SMALL_FEEDS))
    at_load = encode_container(exe.program, prepack=False)
    np.testing.assert_array_equal(got, run_c(Executable.from_bytes(at_load), SMALL_FEEDS)["y"])

    inits = _small_map_model().graph.initializer[::2]  # w1, w2: the same values, other buffers
    weights = {i.name: numpy_helper.to_array(i).copy() for i in inits}
    y = run_bound(data, SMALL_FEEDS, weights, (1, 256, 7, 7))
    np.testing.assert_array_equal(y, got)  # same sums in the same order on every path


def _wino_model() -> onnx.ModelProto:
    """x[1,32,14,14] → Conv 3x3 stride 1 (64 channels) + bias → y: the Winograd path, whose
    weights are packed transformed (U = G g G^T: layout 3)."""
    inits = [
        numpy_helper.from_array(arr((64, 32, 3, 3), F32, 21, low=-0.2, high=0.2), "w1"),
        numpy_helper.from_array(arr((64,), F32, 22), "b1"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y"], pads=[1] * 4)]
    return _float_model("wino", nodes, {"x": [1, 32, 14, 14]}, inits)


def test_winograd_weights_are_packed_at_load() -> None:
    """The Winograd path's transformed weights (U = G g G^T) do not invert exactly: the file keeps
    the 3x3 originals in TENSOR_DATA and no packed copy (no packed blob for this model), and
    loading packs them; weights bound by the session run the window path, which sums
    differently (within rounding of the reference, not bit-identical)."""
    exe = Compiler.compile(_wino_model())
    data = exe.to_bytes()
    feeds = {"x": arr((1, 32, 14, 14), F32, 23, low=-1, high=1)}
    assert PACKED_BLOB not in [b[2] for b in split_container(data)]
    if auto_sgemm_isa() == 2:  # the AVX2 tile (the others may keep it direct)
        assert counts(data) == (0, 1)
    got = run_c(Executable.from_bytes(data), feeds)["y"]
    assert_matches_reference({"y": got}, exe.run_reference(feeds))
    at_load = encode_container(exe.program, prepack=False)
    np.testing.assert_array_equal(got, run_c(Executable.from_bytes(at_load), feeds)["y"])

    w1 = numpy_helper.to_array(_wino_model().graph.initializer[0])
    y = run_bound(data, feeds, {"w1": w1}, (1, 64, 14, 14))
    assert_matches_reference({"y": y}, exe.run_reference(feeds))


def test_stored_packed_flag_is_the_c_constant() -> None:
    assert TENSOR_STORED_PACKED == _core.TENSOR_STORED_PACKED


def _mixed_model() -> onnx.ModelProto:
    """x[1,48,14,14] → Conv 3x3 (96 channels: Winograd on the AVX2 tile) → Relu → Conv 1x1 (96
    channels: A panels) → GlobalAveragePool → Flatten → + z[16,96] → Gemm (transB, 96 → 192)
    → MatMul (192 → 96) → y: every kind of packed weight, channel counts whole panels of every
    tile."""
    inits = [
        numpy_helper.from_array(arr((96, 48, 3, 3), F32, 31, low=-0.2, high=0.2), "w1"),
        numpy_helper.from_array(arr((96, 96, 1, 1), F32, 32, low=-0.2, high=0.2), "w2"),
        numpy_helper.from_array(arr((192, 96), F32, 33, low=-0.2, high=0.2), "w3"),
        numpy_helper.from_array(arr((192, 96), F32, 34, low=-0.2, high=0.2), "w4"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["d"]),
        helper.make_node("GlobalAveragePool", ["d"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Add", ["z", "f"], ["h"]),
        helper.make_node("Gemm", ["h", "w3"], ["g"], transB=1),
        helper.make_node("MatMul", ["g", "w4"], ["y"]),
    ]
    return _float_model("mixed", nodes, {"x": [1, 48, 14, 14], "z": [16, 96]}, inits)


MIXED_FEEDS = {
    "x": arr((1, 48, 14, 14), F32, 35, low=-1, high=1),
    "z": arr((16, 96), F32, 36, low=-1, high=1),
}


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def test_file_holds_each_weight_once() -> None:
    """Conv (Winograd and panel paths), Gemm and MatMul weights: the file is at most 1.1x the
    weights' bytes, each panel-packed weight only in the packed blob."""
    model = _mixed_model()
    exe = Compiler.compile(model)
    data = exe.to_bytes()
    weight_bytes = sum(w.nbytes for w in _weights(model).values())
    assert len(data) <= 1.1 * weight_bytes, (len(data), weight_bytes)
    stored = stored_packed(split_container(data))
    assert sum(stored.values()) >= _weights(model)["w2"].nbytes + 2 * 192 * 96 * 4
    assert len(encode_container(exe.program, prepack=False)) < len(data) + 1024


def test_stored_packed_outputs_are_bit_identical_on_every_path() -> None:
    """The stored-packed file, the same file loaded under another instruction-set level (its
    weights unpacked and packed again), and files packed at load give the same bytes; the
    reference interpreter agrees, and decode() gives back the original weights exactly."""
    model = _mixed_model()
    exe = Compiler.compile(model)
    data = exe.to_bytes()
    assert stored_packed(split_container(data))
    got = run_c(Executable.from_bytes(data), MIXED_FEEDS)["y"]
    at_load = encode_container(exe.program, prepack=False)
    np.testing.assert_array_equal(got, run_c(Executable.from_bytes(at_load), MIXED_FEEDS)["y"])
    assert_matches_reference({"y": got}, exe.run_reference(MIXED_FEEDS))
    decoded = Executable.from_bytes(data)
    np.testing.assert_array_equal(
        decoded.run_reference(MIXED_FEEDS)["y"], exe.run_reference(MIXED_FEEDS)["y"]
    )
    by_name = {t.name: t for t in decode(data).tensors}
    for name, w in _weights(model).items():
        assert by_name[name].data == w.tobytes(), name
    best = auto_sgemm_isa()
    for level in sorted(set(_core.ISA_LEVELS.values())):
        if level >= best or level == 0:
            continue
        _core.set_isa(level)
        other = run_c(Executable.from_bytes(data), MIXED_FEEDS)["y"]
        same = run_c(Executable.from_bytes(at_load), MIXED_FEEDS)["y"]
        _core.set_isa(0)
        np.testing.assert_array_equal(other, same)
        assert_matches_reference({"y": other}, exe.run_reference(MIXED_FEEDS))


def test_weight_with_another_use_is_stored_unpacked() -> None:
    """A weight shared by two packed operands, or also read by another instruction, keeps its
    bytes in TENSOR_DATA; a weight whose one use is a packed operand does not."""
    inits = [
        numpy_helper.from_array(arr((48, 48), F32, 41, low=-0.3, high=0.3), "shared"),
        numpy_helper.from_array(arr((48, 48), F32, 42, low=-0.3, high=0.3), "also_added"),
        numpy_helper.from_array(arr((48, 48), F32, 43, low=-0.3, high=0.3), "alone"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "shared"], ["a"]),
        helper.make_node("MatMul", ["a", "shared"], ["b"]),
        helper.make_node("MatMul", ["b", "also_added"], ["c"]),
        helper.make_node("Add", ["c", "also_added"], ["d"]),
        helper.make_node("MatMul", ["d", "alone"], ["y"]),
    ]
    model = _float_model("uses", nodes, {"x": [48, 48]}, inits)
    exe = Compiler.compile(model)
    data = exe.to_bytes()
    names = {i: a.name for a in exe.program.anchors for i in [a.tensor]}
    stored = {names.get(i) for i in stored_packed(split_container(data))}
    assert stored == {"alone"}
    feeds = {"x": arr((48, 48), F32, 44, low=-1, high=1)}
    got = run_c(Executable.from_bytes(data), feeds)["y"]
    at_load = encode_container(exe.program, prepack=False)
    np.testing.assert_array_equal(got, run_c(Executable.from_bytes(at_load), feeds)["y"])


def test_isa_changed_after_load_is_an_error_for_weights_stored_packed(exe: Executable) -> None:
    """A weight stored only packed has no other form to fall back on once the micro-kernel it
    was packed for is gone: loading again after the change packs it for the new one."""
    if auto_sgemm_isa() == 1:
        pytest.skip("only the portable micro-kernel on this CPU")
    loaded = Executable.from_bytes(exe.to_bytes())
    loaded.native()
    _core.set_isa(1)
    with pytest.raises(errors.InvalidStateError, match="stored packed"):
        run_c(loaded, FEEDS)
    np.testing.assert_array_equal(
        run(exe.to_bytes()), run(encode_container(exe.program, prepack=False))
    )


def test_popef_dump_counts_the_weights_stored_packed(exe: Executable, tmp_path) -> None:
    import io

    from pyipu.cli.popef_dump import dump

    exe.save(tmp_path / "m.popef")
    out = io.StringIO()
    dump(str(tmp_path / "m.popef"), out)
    nbytes = (W1[0] * W1[1] * 9 + 24 * 60) * 4
    assert f"(2 of them, {nbytes} bytes, stored only packed)" in out.getvalue()


@pytest.mark.parametrize("hw,layout", [(20, 1), (4, 2)], ids=["a_panels", "b_panels"])
def test_unpacking_covers_k_chunks_and_partial_blocks(hw: int, layout: int) -> None:
    """Conv 1x1, 300 → 100 channels: K spans two sgemm K chunks, the channels two row blocks
    of 96 and a partial micro-kernel panel (A panels on a 20x20 map, B panels of 32 columns on
    the 4x4 small-map path, AVX-512); decode() gives the weights back exactly and the outputs
    match the file packed at load."""
    w = arr((100, 300, 1, 1), F32, 51, low=-0.2, high=0.2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    model = _float_model(
        "k_chunks", nodes, {"x": [1, 300, hw, hw]}, [numpy_helper.from_array(w, "w")]
    )
    exe = Compiler.compile(model)
    data = exe.to_bytes()
    assert list(stored_packed(split_container(data)).values()) == [w.nbytes]
    if auto_sgemm_isa() == 3:
        (payload,) = [b[3] for b in split_container(data) if b[2] == PACKED_BLOB]
        assert field(bytearray(payload), 0, 12, "<I") == layout
    (t,) = [t for t in decode(data).tensors if t.name == "w"]
    assert t.data == w.tobytes()
    feeds = {"x": arr((1, 300, hw, hw), F32, 52, low=-1, high=1)}
    got = run_c(Executable.from_bytes(data), feeds)["y"]
    at_load = encode_container(exe.program, prepack=False)
    np.testing.assert_array_equal(got, run_c(Executable.from_bytes(at_load), feeds)["y"])
    assert_matches_reference({"y": got}, exe.run_reference(feeds))
