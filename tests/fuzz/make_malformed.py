"""Write the hand-made corpus of malformed containers (tests/fuzz/malformed/).

    python3 tests/fuzz/make_malformed.py

Each file breaks ONE rule of docs/popef.md / docs/bytecode.md in an otherwise valid container
(seeds from corpus/container/), with the header's file_size and checksum recomputed unless the
case is about them, so the check under test is the first one to fail. `expected.tsv` lists per
file the C status, the Python exception class and a regex of the message: tests/
test_malformed_containers.py checks them, and meson replays the files through the fuzz targets
(tests/fuzz/meson.build), which keeps them in the coverage measurement.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "malformed"
M64 = (1 << 64) - 1


def hash64(data: bytes, seed: int = 0) -> int:
    """ipu_hash64 (runtime_c/src/common/status.c; specified in docs/popef.md)."""

    def mix(x: int) -> int:
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & M64
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & M64
        return x ^ (x >> 33)

    h = [seed ^ 0x9E3779B97F4A7C15, (seed + 0x632BE59BD9B4E019) & M64]
    h += [seed ^ 0x85EBCA77C2B2AE63, (seed + 0x27D4EB2F165667C5) & M64]
    n, i = len(data), 0
    while i + 32 <= n:
        for k in range(4):
            v = (h[k] ^ struct.unpack_from("<Q", data, i + 8 * k)[0]) * 0x9FB21C651E98DF25
            v &= M64
            h[k] = v ^ (v >> 29)
        i += 32
    acc = n
    for k in range(4):
        acc = mix(acc ^ h[k])
    while i + 8 <= n:
        acc = mix(acc ^ struct.unpack_from("<Q", data, i)[0])
        i += 8
    tail = int.from_bytes(data[i:], "little")
    return mix(acc ^ tail ^ 0xA0761D6478BD642F)


CHUNK = 4 << 20  # IPU_CONTAINER_CHUNK


def header_checksum(image: bytes) -> int:
    """The header's checksum of `image` (ipu_container_checksum of the bytes after the header,
    by the header's format version: 1 hashes them whole, 2 hashes the list of its chunks')."""
    body, version = image[64:], struct.unpack_from("<I", image, 8)[0]
    if version == 1:
        return hash64(body)
    hashes = [hash64(body[i : i + CHUNK], i // CHUNK) for i in range(0, len(body), CHUNK)]
    return hash64(b"".join(h.to_bytes(8, "little") for h in hashes))


class Image:
    """A container image being broken: table entries, METADATA and PROGRAM fields by name."""

    def __init__(self, seed: str) -> None:
        self.b = bytearray((HERE / "corpus" / "container" / f"{seed}.bin").read_bytes())
        self.count = struct.unpack_from("<I", self.b, 12)[0]
        self.entries = [struct.unpack_from("<IIQQ", self.b, 64 + 32 * i) for i in range(self.count)]
        self.meta = next(e[2] for e in self.entries if e[0] == 1)
        (nsub,) = struct.unpack_from("<I", self.b, self.meta + 28)
        (nstages,) = struct.unpack_from("<I", self.b, self.meta + 52)
        assert nstages == 0
        self.num_tensors, self.num_anchors = struct.unpack_from("<II", self.b, self.meta + 20)
        self.tensors = self.meta + ((56 + 4 * nsub + 7) & ~7)
        self.anchors = self.tensors + 96 * self.num_tensors
        self.strings = self.anchors + 24 * self.num_anchors

    def u32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.b, off, v & 0xFFFFFFFF)

    def u64(self, off: int, v: int) -> None:
        struct.pack_into("<Q", self.b, off, v & M64)

    def entry(self, i: int, field: str, v: int) -> None:
        at = {"type": 0, "id": 4, "offset": 8, "size": 16, "reserved": 24}[field]
        (self.u32 if at < 8 else self.u64)(64 + 32 * i + at, v)

    def tensor(self, t: int, field: str) -> int:
        at = {"dtype": 0, "ndim": 4, "loc": 8, "offset": 16, "nbytes": 24, "dim0": 32}[field]
        return self.tensors + 96 * t + at

    def tensor_where(self, pred: Callable[[tuple], bool]) -> int:
        for t in range(self.num_tensors):
            rec = struct.unpack_from("<IIIIQQ8q", self.b, self.tensors + 96 * t)
            if pred(rec):
                return t
        raise LookupError("no such tensor")

    def anchor(self, a: int, field: str) -> int:
        at = {"name_off": 0, "name_len": 4, "dir": 8, "tensor": 12, "subgraph": 16, "flags": 20}
        return self.anchors + 24 * a + at[field]

    def program(self, pid: int) -> int:
        return next(e[2] for e in self.entries if e[0] == 3 and e[1] == pid)

    def fixed(self, size: bool = True, checksum: bool = True) -> bytes:
        if size:
            self.u64(16, len(self.b))
        if checksum:
            self.u64(32, header_checksum(bytes(self.b)))
        return bytes(self.b)


CORRUPT, VERSION, BAD = "CorruptFileError", "VersionError", "BadProgramError"


def cases() -> dict[str, tuple[str, str, bytes]]:
    """{name: (exception class, message regex, bytes)}."""
    out: dict[str, tuple[str, str, bytes]] = {}

    def case(name: str, exc: str, regex: str, seed: str = "conv", **fix: bool):
        def deco(fn: Callable[[Image], object]) -> None:
            img = Image(seed)
            fn(img)
            out[name] = (exc, regex, img.fixed(**fix))

        return deco

    # ---- header
    out["empty"] = (CORRUPT, r"smaller than the 64-byte header", b"")
    out["header_only_63"] = (CORRUPT, r"smaller than the 64-byte header", Image("conv").b[:63])
    case("bad_magic", CORRUPT, r"bad magic")(
        lambda i: i.b.__setitem__(slice(0, 8), b"GGUF\0\0\0\0")
    )
    case("version_3", VERSION, r"format version 3 is not supported")(lambda i: i.u32(8, 3))
    # the seeds are version 1 files: as version 2 (chunk hashes) their checksum does not match
    case("version_2_checksum", CORRUPT, r"checksum mismatch", checksum=False)(lambda i: i.u32(8, 2))
    case("version_max", VERSION, r"format version 4294967295")(lambda i: i.u32(8, M64))
    case("file_size_small", CORRUPT, r"file_size 100 differs", size=False)(lambda i: i.u64(16, 100))
    case("padded_file", CORRUPT, r"differs from the actual size", size=False)(
        lambda i: i.b.extend(b"\0" * 64)
    )
    case("table_offset", CORRUPT, r"blob_table_offset 128 is not 64")(lambda i: i.u64(40, 128))
    case("huge_blob_count", CORRUPT, r"blob_count 4294967295 exceeds the limit 65536")(
        lambda i: i.u32(12, M64)
    )
    case("blob_count_past_end", CORRUPT, r"blob table \(65536 entries.*extends past the end")(
        lambda i: i.u32(12, 65536)
    )
    case("reserved_header", CORRUPT, r"reserved header byte 50 is not zero")(
        lambda i: i.b.__setitem__(50, 1)
    )
    case("bad_checksum", CORRUPT, r"checksum mismatch", checksum=False)(lambda i: i.u64(32, 1))
    case("flipped_payload_bit", CORRUPT, r"checksum mismatch", checksum=False)(
        lambda i: i.b.__setitem__(len(i.b) - 1, i.b[-1] ^ 1)
    )
    # ---- blob table
    case("unknown_blob_type", CORRUPT, r"blob 1 has unknown type 9")(
        lambda i: i.entry(1, "type", 9)
    )
    case("id_on_metadata", CORRUPT, r"blob 0 \(METADATA\) has id 3, must be 0")(
        lambda i: i.entry(0, "id", 3)
    )
    case("entry_reserved", CORRUPT, r"blob 2 reserved field is not zero")(
        lambda i: i.entry(2, "reserved", 1)
    )
    case("misaligned_offset", CORRUPT, r"blob 1 offset \d+ is not a multiple of 64")(
        lambda i: i.entry(1, "offset", i.entries[1][2] + 8)
    )
    case("offset_in_table", CORRUPT, r"blob 1 offset 64 is inside the header or blob table")(
        lambda i: i.entry(1, "offset", 64)
    )
    case("offset_past_end", CORRUPT, r"blob 1 offset 1048576 \+ size \d+ exceeds file size")(
        lambda i: i.entry(1, "offset", 1 << 20)
    )
    case("size_past_end", CORRUPT, r"blob 4 offset \d+ \+ size 7041 exceeds file size")(
        lambda i: i.entry(4, "size", 7041)
    )
    case("wrapping_offset_plus_size", CORRUPT, r"offset 18446744073709551552 \+ size 128 exceeds")(
        lambda i: (i.entry(1, "offset", M64 - 63), i.entry(1, "size", 128))
    )
    case("huge_size", CORRUPT, r"blob 1 offset \d+ \+ size 18446744073709551615 exceeds")(
        lambda i: i.entry(1, "size", M64)
    )
    case("second_metadata", CORRUPT, r"blob 1 is a second METADATA blob \(first is blob 0\)")(
        lambda i: i.entry(1, "type", 1)
    )
    case("no_metadata", CORRUPT, r"no METADATA blob")(
        lambda i: (i.entry(0, "type", 3), i.entry(0, "id", 7))
    )
    case("overlapping_blobs", CORRUPT, r"blob 1 \[\d+, \+320\) overlaps blob 2")(
        lambda i: i.entry(2, "offset", i.entries[1][2])
    )
    case("duplicate_program_id", CORRUPT, r"blobs 2 and 3 are both PROGRAM 0")(
        lambda i: i.entry(3, "id", 0)
    )

    def second_opaque(i: Image) -> None:
        # Split the OPAQUE blob: a second one of the same name in the tail of the first.
        t, _, off, size = i.entries[4]
        half = (size // 2) & ~63
        tail = bytes(i.b[off : off + 16])  # u32 name_len, "pyipu.packed", pad
        i.b[off + half : off + half + 16] = tail
        i.entry(4, "size", half)
        i.u32(12, 6)
        i.b[64 + 32 * 6 : 64 + 32 * 6] = b""  # the table has room: blobs start at 256
        struct.pack_into("<IIQQQ", i.b, 64 + 32 * 5, t, 0, off + half, size - half, 0)

    case("duplicate_opaque_name", CORRUPT, r'blobs 4 and 5 are both OPAQUE "pyipu.packed"')(
        second_opaque
    )
    case("opaque_name_len_0", CORRUPT, r"blob 4 \(OPAQUE\) name length 0 is outside 1..255")(
        lambda i: i.u32(i.entries[4][2], 0)
    )
    case("opaque_name_nul", CORRUPT, r"blob 4 \(OPAQUE\) name contains a NUL byte")(
        lambda i: i.b.__setitem__(i.entries[4][2] + 5, 0)
    )
    case("opaque_name_utf8", CORRUPT, r"blob 4 \(OPAQUE\) name is not valid UTF-8")(
        lambda i: i.b.__setitem__(i.entries[4][2] + 5, 0xFF)
    )
    # ---- METADATA (seed "scale": 5 tensors, 4 anchors)
    m = "scale"
    case("ipu_version", CORRUPT, r"unknown ipu_version 7", m)(lambda i: i.u32(i.meta, 7))
    case("huge_num_tensors", CORRUPT, r"num_tensors 4294967295 > 1048576", m)(
        lambda i: i.u32(i.meta + 20, M64)
    )
    case("num_tensors_layout", CORRUPT, r"layout \(1 subgraphs, 1048576 tensors", m)(
        lambda i: i.u32(i.meta + 20, 1 << 20)
    )
    case("num_anchors_gt_tensors", CORRUPT, r"num_anchors 6 > num_tensors 5", m)(
        lambda i: i.u32(i.meta + 24, 6)
    )
    case("zero_subgraphs", CORRUPT, r"num_subgraphs is 0", m)(lambda i: i.u32(i.meta + 28, 0))
    case("index_anchor_range", CORRUPT, r"index_anchor 9 out of range \(4 anchors\)", m)(
        lambda i: i.u32(i.meta + 36, 9)
    )
    case("arena_misaligned", CORRUPT, r"arena_size 136 not a multiple of 64", m)(
        lambda i: i.u64(i.meta + 40, 136)
    )
    case("strings_size", CORRUPT, r"blob is 648 bytes, layout .* needs 656", m)(
        lambda i: i.u32(i.meta + 48, 16)
    )

    def two_d(rec: tuple) -> bool:
        return rec[1] == 2

    def set_dims(i: Image, d0: int, d1: int) -> None:
        t = i.tensor_where(two_d)
        i.u64(i.tensor(t, "dim0"), d0)
        i.u64(i.tensor(t, "dim0") + 8, d1)

    case("overflowing_shape", CORRUPT, r"tensor \d: element count overflows", m)(
        lambda i: set_dims(i, 1 << 40, 1 << 40)
    )
    case(
        "overflowing_nbytes", CORRUPT, r"tensor \d: nbytes \d+ != 4611686018427387904 elements", m
    )(lambda i: set_dims(i, 1 << 31, 1 << 31))
    case("negative_dim", CORRUPT, r"tensor \d: dim 0 is negative \(-1\)", m)(
        lambda i: set_dims(i, M64, 3)
    )
    case("unused_dim", CORRUPT, r"tensor 0: unused dim 7 is 1, not 0", m)(
        lambda i: i.u64(i.tensor(0, "dim0") + 56, 1)
    )
    case("ndim_9", CORRUPT, r"tensor 0: ndim 9 > 8", m)(lambda i: i.u32(i.tensor(0, "ndim"), 9))
    case("unknown_dtype", CORRUPT, r"tensor 0: unknown dtype 99", m)(
        lambda i: i.u32(i.tensor(0, "dtype"), 99)
    )
    case("nbytes_mismatch", CORRUPT, r"tensor 0: nbytes \d+ != ", m)(
        lambda i: i.u64(i.tensor(0, "nbytes"), 4)
    )
    case("tensor_misaligned", CORRUPT, r"tensor 0: offset 8 not a multiple of 64", m)(
        lambda i: i.u64(i.tensor(0, "offset"), 8)
    )
    case("tensor_past_arena", CORRUPT, r"tensor 0: .*arena", m)(
        lambda i: i.u64(i.tensor(0, "offset"), 1 << 30)
    )
    case("tensor_offset_wrap", CORRUPT, r"tensor 0: ", m)(
        lambda i: i.u64(i.tensor(0, "offset"), M64 - 63)
    )
    case("dangling_anchor", CORRUPT, r"anchor 0: tensor 99 out of range \(5 tensors\)", m)(
        lambda i: i.u32(i.anchor(0, "tensor"), 99)
    )
    case("anchor_name_past_strings", CORRUPT, r"anchor 1: name \[1000, \+\d+\) exceeds", m)(
        lambda i: i.u32(i.anchor(1, "name_off"), 1000)
    )
    case("anchor_name_wrap", CORRUPT, r"anchor 1: name \[4294967295, \+\d+\) exceeds", m)(
        lambda i: i.u32(i.anchor(1, "name_off"), M64)
    )
    case("anchor_name_len_0", CORRUPT, r"anchor 0: name length 0 not in 1..1024", m)(
        lambda i: i.u32(i.anchor(0, "name_len"), 0)
    )
    case("anchor_name_nul", CORRUPT, r"anchor 0: name contains a NUL byte", m)(
        lambda i: i.b.__setitem__(i.strings, 0)
    )
    case("anchor_direction", CORRUPT, r"anchor 2: unknown direction 3", m)(
        lambda i: i.u32(i.anchor(2, "dir"), 3)
    )
    case("anchor_subgraph", CORRUPT, r"anchor 0: subgraph 5 out of range", m)(
        lambda i: i.u32(i.anchor(0, "subgraph"), 5)
    )

    def dup_name(i: Image) -> None:
        for f in ("name_off", "name_len"):
            v = struct.unpack_from("<I", i.b, i.anchor(0, f))[0]
            i.u32(i.anchor(1, f), v)

    case("duplicate_anchor_names", CORRUPT, r'duplicate anchor name "', m)(dup_name)
    case("missing_load_program", CORRUPT, r"load_program 42 does not exist", m)(
        lambda i: i.u32(i.meta + 32, 42)
    )
    case("missing_main_program", CORRUPT, r"main program 9 of subgraph 0 does not exist", m)(
        lambda i: i.u32(i.meta + 56, 9)
    )

    # ---- PROGRAM (seed "scale": program 1 is Main)
    def ins(i: Image, field: str) -> int:
        at = {"count": 0, "reserved": 4, "op": 8, "n_in": 10, "n_out": 11, "n_attr": 12}
        return i.program(1) + at[field]

    case("unknown_opcode", BAD, r"unknown opcode 999", m)(
        lambda i: struct.pack_into("<H", i.b, ins(i, "op"), 999)
    )
    case("wrong_operand_count", BAD, r"2 inputs, expected 1\.\.1", m)(
        lambda i: struct.pack_into("<H", i.b, ins(i, "op"), 13)  # MUL -> RELU
    )
    case("operand_out_of_range", BAD, r"input 0: tensor index 999 out of range", m)(
        lambda i: i.u32(ins(i, "op") + 8, 999)
    )
    case("instruction_count", BAD, r"instruction count exceeds", m)(
        lambda i: i.u32(ins(i, "count"), 1000)
    )
    case("huge_instruction_count", BAD, r"instruction count exceeds", m)(
        lambda i: i.u32(ins(i, "count"), M64)
    )
    case("program_reserved", BAD, r"reserved header field not zero", m)(
        lambda i: i.u32(ins(i, "reserved"), 1)
    )
    case("trailing_bytes", BAD, r"does not end after the last instruction", m)(
        lambda i: i.u32(ins(i, "count"), 0)
    )
    case("too_many_attrs", BAD, r"65 attributes > 64", m)(
        lambda i: struct.pack_into("<H", i.b, ins(i, "n_attr"), 65)
    )
    case("attrs_past_end", BAD, r"bytes needed at offset 8", m)(
        lambda i: struct.pack_into("<H", i.b, ins(i, "n_attr"), 64)
    )

    def write_weight(i: Image) -> None:
        t = i.tensor_where(lambda rec: rec[2] == 2)  # location TENSOR_DATA
        i.u32(ins(i, "op") + 16, t)  # MUL's output operand

    case("writes_tensor_data", BAD, r"writes TENSOR_DATA tensor", m)(write_weight)

    # ---- roles the runtime relies on (docs/bytecode.md, "What the verifier proves"); the
    # runtime crashed on the first two before the verifier refused them
    def weight_anchor(i: Image) -> int:
        flags = [struct.unpack_from("<I", i.b, i.anchor(a, "flags"))[0] for a in range(4)]
        return flags.index(1)  # IPU_ANCHOR_TENSOR_DATA

    def drop_binds(i: Image) -> None:
        (load,) = struct.unpack_from("<I", i.b, i.meta + 32)
        entry = next(k for k, e in enumerate(i.entries) if e[0] == 3 and e[1] == load)
        i.u32(i.program(load), 0)  # no instructions: the blob is its 8-byte header
        i.entry(entry, "size", 8)

    case("index_anchor_weight", CORRUPT, r"index_anchor \d+ is a TENSOR_DATA anchor", m)(
        lambda i: i.u32(i.meta + 36, weight_anchor(i))
    )
    case(
        "index_anchor_float", CORRUPT, r"index_anchor 0: tensor 0 is float32 .*not one integer", m
    )(lambda i: i.u32(i.meta + 36, 0))
    case("output_weight_anchor", CORRUPT, r"a TENSOR_DATA anchor \(a weight\) must be an input", m)(
        lambda i: i.u32(i.anchor(weight_anchor(i), "dir"), 2)
    )
    case("main_is_load", CORRUPT, r"main program 0 of subgraph 0 is the Load program", m)(
        lambda i: i.u32(i.meta + 56, 0)
    )
    case(
        "load_without_bind",
        BAD,
        r"program 1 instruction 0 \(mul\): input 1 reads TENSOR_DATA tensor \d+, which the "
        r"Load program does not BIND",
        m,
    )(drop_binds)
    return out


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for f in OUT.glob("*.bin"):
        f.unlink()
    lines = ["# file\texception\tmessage regex (written by make_malformed.py)"]
    for name, (exc, regex, data) in sorted(cases().items()):
        (OUT / f"{name}.bin").write_bytes(data)
        lines.append(f"{name}.bin\t{exc}\t{regex}")
    (OUT / "expected.tsv").write_text("\n".join(lines) + "\n")
    print(f"{len(lines) - 1} malformed containers in {OUT}")


if __name__ == "__main__":
    main()
