"""ModelIR ⇄ container blobs (METADATA, TENSOR_DATA, PROGRAM, OPAQUE).

Byte layouts: runtime_c/include/ipu/ipu_container.h, ipu_executable.h and docs/bytecode.md.
`encode` produces the blob list that `pyipu._core.write_container` turns into a file; `decode` is
a Python reader of a whole container (checksum not verified) so the NumPy reference can run a
saved file; only weights stored packed need the C extension (its unpacking of their layout).
Anything malformed raises CorruptFileError (a ValueError).
"""

from __future__ import annotations

import bisect
import dataclasses
import struct

from pyipu.compiler import sources
from pyipu.compiler.ir import (
    ALIGN,
    MAX_ATTRS,
    MAX_DIMS,
    NO_INDEX,
    OP_ARITY,
    Anchor,
    Direction,
    Instr,
    Location,
    ModelIR,
    Program,
    Stage,
    TensorSpec,
    align,
    np_dtype,
)
from pyipu.enums import DType, Op
from pyipu.errors import CorruptFileError, Error, VersionError

BLOB_METADATA, BLOB_TENSOR_DATA, BLOB_PROGRAM, BLOB_OPAQUE = 1, 2, 3, 4
MAGIC = b"PYIPUEF\0"
FORMAT_VERSION = 2  # IPU_CONTAINER_VERSION, what the C writer writes
MIN_FORMAT_VERSION = 1  # version 1 differs only in its checksum: still read
ANCHOR_TENSOR_DATA = 1
# Tensor flag IPU_TENSOR_STORED_PACKED (ipu_executable.h): the bytes are only in the packed blob.
TENSOR_STORED_PACKED = 1
STAGES_PIPELINED, STAGES_STEP_END = 1, 2  # stage table flags
# OPAQUE blob of operands pre-packed for the kernels (IPU_PACKED_BLOB_NAME, ipu_executable.h):
# derived from the other blobs, so never part of a ModelIR; encode_container writes a fresh one.
PACKED_BLOB = "pyipu.packed"
# OPAQUE blob of an engine-cache entry: its key and a digest of its header (compiler/cache.py).
# Describes one file, so never part of a ModelIR either.
CACHE_BLOB = "pyipu.cache"
_DERIVED_BLOBS = (PACKED_BLOB, CACHE_BLOB)

Blob = tuple[int, int, "str | None", "bytes | memoryview"]  # (type, id, name for OPAQUE, data)

_META_HEAD = struct.Struct("<10IQ2I")  # 56 bytes
_TENSOR = struct.Struct("<4I2Q8q")  # 96 bytes
_ANCHOR = struct.Struct("<6I")  # 24 bytes
_INSTR_HEAD = struct.Struct("<HBBHH")  # 8 bytes
_FILE_HEAD = struct.Struct("<8sIIQQQQ16s")  # 64 bytes
_BLOB_ENTRY = struct.Struct("<IIQQQ")  # 32 bytes


def _pad8(b: bytearray) -> None:
    b.extend(bytes(-len(b) % 8))


# ---------------------------------------------------------------- encode


def encode_metadata(ir: ModelIR, stored: frozenset[int] = frozenset()) -> bytes:
    """The METADATA blob; tensors in `stored` are flagged as stored packed (offset 0)."""
    strings = bytearray()
    anchors = bytearray()
    for a in ir.anchors:
        name = a.name.encode()
        if not 1 <= len(name) <= 1024:
            raise ValueError(f"anchor name {a.name!r} must be 1..1024 bytes of UTF-8")
        flags = ANCHOR_TENSOR_DATA if a.has_tensor_data else 0
        anchors += _ANCHOR.pack(len(strings), len(name), a.direction, a.tensor, a.subgraph, flags)
        strings += name
    out = bytearray(
        _META_HEAD.pack(
            ir.ipu_version,
            ir.num_ipus,
            ir.replication_factor,
            ir.batches_per_step,
            ir.num_io_tiles,
            len(ir.tensors),
            len(ir.anchors),
            ir.num_subgraphs,
            ir.load_program,
            ir.index_anchor,
            ir.arena_size,
            len(strings),
            len(ir.stages),
        )
    )
    out += struct.pack(f"<{ir.num_subgraphs}I", *ir.main_programs)
    step_end = ir.step_end_program != NO_INDEX
    if ir.stages:
        flags = (STAGES_PIPELINED if ir.pipelined else 0) | (STAGES_STEP_END if step_end else 0)
        out += struct.pack("<I", flags)
        for st in ir.stages:
            out += struct.pack("<3I", st.program, st.ipu, st.copy_program)
        if step_end:
            out += struct.pack("<I", ir.step_end_program)
    elif ir.pipelined or step_end:
        raise ValueError("pipelining and a step-end program need a stage table")
    _pad8(out)
    for i, t in enumerate(ir.tensors):
        if t.ndim > MAX_DIMS:
            raise ValueError(f"tensor {t.name!r} has more than {MAX_DIMS} dims")
        dims = list(t.shape) + [0] * (MAX_DIMS - t.ndim)
        flags, offset = (TENSOR_STORED_PACKED, 0) if i in stored else (0, t.offset)
        out += _TENSOR.pack(t.dtype, t.ndim, t.location, flags, offset, t.nbytes, *dims)
    out += anchors
    out += strings
    _pad8(out)
    return bytes(out)


def encode_program(instrs: tuple[Instr, ...] | list[Instr]) -> bytes:
    out = bytearray(struct.pack("<II", len(instrs), 0))
    for ins in instrs:
        operands = (*ins.inputs, *ins.outputs)
        if len(ins.attrs) > MAX_ATTRS:
            raise ValueError(f"{ins}: more than {MAX_ATTRS} attributes")
        out += _INSTR_HEAD.pack(ins.op, len(ins.inputs), len(ins.outputs), len(ins.attrs), 0)
        out += struct.pack(f"<{len(operands)}I", *operands)
        if len(operands) % 2:
            out += bytes(4)
        out += struct.pack(f"<{len(ins.attrs)}q", *ins.attrs)
    return bytes(out)


def encode(ir: ModelIR, stored: frozenset[int] = frozenset()) -> list[Blob]:
    """The container blobs of a ModelIR, for pyipu._core.write_container. The tensors in `stored`
    are left out of TENSOR_DATA (the others moved up to close the gaps) and flagged as stored
    packed: only a packed blob that holds them makes the container valid."""
    if stored:
        ir = _without(ir, stored)
    blobs: list[Blob] = [(BLOB_METADATA, 0, None, encode_metadata(ir, stored))]
    data = ir.tensor_data_blob(stored)
    if data:
        blobs.append((BLOB_TENSOR_DATA, 0, None, data))
    blobs += [(BLOB_PROGRAM, p.id, None, encode_program(p.instrs)) for p in ir.programs]
    blobs += [
        (BLOB_OPAQUE, 0, name, payload) for name, payload in ir.opaque if name not in _DERIVED_BLOBS
    ]
    return blobs


def _without(ir: ModelIR, stored: frozenset[int]) -> ModelIR:
    """ir with the TENSOR_DATA tensors in `stored` dropped from the TENSOR_DATA blob (location
    kept, no data, offset 0) and the others' byte ranges moved up, overlapping ones together."""
    spans = sorted(
        (t.offset, t.offset + t.nbytes)
        for i, t in enumerate(ir.tensors)
        if t.location == Location.TENSOR_DATA and i not in stored
    )
    moved: dict[int, int] = {}  # start of each merged run of ranges -> its new start
    runs: list[list[int]] = []
    for lo, hi in spans:
        if runs and lo < runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], hi)
        else:
            runs.append([lo, hi])
    at = 0
    for lo, hi in runs:
        moved[lo] = at
        at = align(at + hi - lo)
    starts = [r[0] for r in runs]
    tensors = []
    for i, t in enumerate(ir.tensors):
        if i in stored:
            t = dataclasses.replace(t, offset=0, data=None)
        elif t.location == Location.TENSOR_DATA:
            lo = starts[bisect.bisect_right(starts, t.offset) - 1]  # the run holding it
            t = dataclasses.replace(t, offset=moved[lo] + t.offset - lo)
        tensors.append(t)
    return dataclasses.replace(ir, tensors=tuple(tensors))


def encode_container(ir: ModelIR, compiler_hash: int | None = None, prepack: bool = True) -> bytes:
    """A complete container image, written by the C writer (needs pyipu._core). With `prepack`,
    the C verifier packs the operands its kernels want packed (for this machine's micro-kernel)
    and the image carries them in a PACKED_BLOB blob, so loading it maps them instead of packing
    (docs/popef.md, "Pre-packed operands"). A weight whose one use is such an operand, in a
    layout that unpacks exactly, is stored only packed: its bytes leave TENSOR_DATA."""
    try:
        from pyipu import _core
    except ImportError as e:
        raise ImportError(
            "writing a PopEF container needs the pyipu._core extension (build pyipu)"
        ) from e
    blobs = encode(ir)
    image = bytes(_core.write_container(blobs, compiler_hash=compiler_hash))
    if not prepack:
        return image
    try:
        native = _core.Executable(_core.Container.from_bytes(image))
    except Error:  # the runtime would refuse the image anyway (some tests write such files)
        return image
    packed = native.packed_blob()
    stored = frozenset(native.packed_only())
    del native  # its copy of the image and its packed buffers
    if packed is None:
        return image
    del image
    if stored:
        blobs = encode(ir, stored)
    blobs.append((BLOB_OPAQUE, 0, PACKED_BLOB, packed))
    return bytes(_core.write_container(blobs, compiler_hash=compiler_hash))


# ---------------------------------------------------------------- decode


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, fmt: struct.Struct | str) -> tuple:
        s = fmt if isinstance(fmt, struct.Struct) else struct.Struct(fmt)
        if self.pos + s.size > len(self.data):
            raise CorruptFileError(f"{self.what}: truncated at byte {self.pos}")
        v = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def skip_pad8(self) -> None:
        pad = -self.pos % 8
        if self.data[self.pos : self.pos + pad] != bytes(pad):
            raise CorruptFileError(f"{self.what}: nonzero padding at byte {self.pos}")
        self.pos += pad


def split_container(data: bytes | memoryview, views: bool = False) -> list[Blob]:
    """The blobs of a container image (header and blob table checked; checksum not verified).
    With `views`, payloads are memoryviews into `data` instead of copies."""
    if len(data) < _FILE_HEAD.size:
        raise CorruptFileError("not a pyipu PopEF file: shorter than its 64-byte header")
    magic, version, count, file_size, _hash, _checksum, table, _res = _FILE_HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptFileError("not a pyipu PopEF file: bad magic")
    if not MIN_FORMAT_VERSION <= version <= FORMAT_VERSION:
        raise VersionError(f"unsupported container format version {version}")
    if file_size != len(data):
        raise CorruptFileError(f"container says {file_size} bytes but has {len(data)}")
    table_end = table + count * _BLOB_ENTRY.size
    if table != _FILE_HEAD.size or table_end > len(data):
        raise CorruptFileError("container blob table is out of bounds")
    blobs: list[Blob] = []
    spans: list[tuple[int, int]] = []
    for i in range(count):
        btype, bid, off, size, _ = _BLOB_ENTRY.unpack_from(data, table + i * _BLOB_ENTRY.size)
        if off % ALIGN or off < table_end or off + size > len(data):
            raise CorruptFileError(
                f"blob {i}: offset {off} / size {size} out of bounds or misaligned"
            )
        spans.append((off, off + size))
        payload = data[off : off + size]
        name = None
        if btype == BLOB_OPAQUE:
            if size < 4:
                raise CorruptFileError(f"blob {i} (OPAQUE) is too small for its name header")
            (n,) = struct.unpack_from("<I", payload)
            head = align(4 + n, 8)
            if not 1 <= n <= 255 or head > size:
                raise CorruptFileError(f"blob {i} (OPAQUE) has a bad name length {n}")
            name = bytes(payload[4 : 4 + n]).decode()
            payload = payload[head:]
        elif btype not in (BLOB_METADATA, BLOB_TENSOR_DATA, BLOB_PROGRAM):
            raise CorruptFileError(f"blob {i} has unknown type {btype}")
        blobs.append((btype, bid, name, payload if views else bytes(payload)))
    spans.sort()
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
        raise CorruptFileError("container blobs overlap")
    return blobs


def decode_program(pid: int, data: bytes, num_tensors: int) -> Program:
    r = _Reader(data, f"program {pid}")
    count, reserved = r.take("<II")
    if reserved:
        raise CorruptFileError(f"program {pid}: reserved field is {reserved}")
    instrs = []
    for k in range(count):
        where = f"program {pid} instruction {k}"
        op, n_in, n_out, n_attr, res = r.take(_INSTR_HEAD)
        if op not in OP_ARITY or res:
            raise CorruptFileError(f"{where}: unknown opcode {op}")
        lo, hi, outs = OP_ARITY[op]
        if not lo <= n_in <= hi or n_out != outs or n_attr > MAX_ATTRS:
            raise CorruptFileError(f"{where}: bad operand counts for {Op(op).name}")
        operands = r.take(f"<{n_in + n_out}I")
        if any(t >= num_tensors for t in operands):
            raise CorruptFileError(f"{where}: tensor index out of range")
        if (n_in + n_out) % 2:
            r.take("<I")
        attrs = r.take(f"<{n_attr}q")
        instrs.append(Instr(Op(op), operands[:n_in], operands[n_in:], attrs))
    if r.pos != len(data):
        raise CorruptFileError(
            f"program {pid}: {len(data) - r.pos} bytes after the last instruction"
        )
    return Program(pid, tuple(instrs))


def _unpacker(packed: bytes | None):
    """unpack(i, nbytes): the bytes of tensor i, stored packed in the payload `packed`."""

    def unpack(i: int, nbytes: int) -> bytes:
        if packed is None:
            raise CorruptFileError(f"metadata: tensor {i} is stored packed, but no packed blob")
        try:
            from pyipu import _core
        except ImportError as e:
            raise ImportError(
                f"tensor {i} is stored packed: unpacking it needs the pyipu._core extension"
            ) from e
        try:
            return _core.packed_unpack(packed, i, nbytes)
        except Error as e:
            raise CorruptFileError(f"tensor {i}: {e}") from None

    return unpack


def decode_metadata(data: bytes, tensor_data: bytes, packed: bytes | None = None) -> dict:
    """The METADATA fields; a tensor stored packed is unpacked from the `packed` blob payload and
    placed after the TENSOR_DATA blob's bytes (a ModelIR holds every weight unpacked)."""
    r = _Reader(data, "metadata")
    (
        ipu_version,
        num_ipus,
        replication,
        bps,
        io_tiles,
        num_tensors,
        num_anchors,
        num_subgraphs,
        load_program,
        index_anchor,
        arena_size,
        strings_size,
        num_stages,
    ) = r.take(_META_HEAD)
    if ipu_version not in (2, 21) or min(num_ipus, replication, bps, num_subgraphs) < 1:
        raise CorruptFileError("metadata: bad target fields")
    if num_anchors > num_tensors or arena_size % ALIGN:
        raise CorruptFileError("metadata: bad counts")
    mains = r.take(f"<{num_subgraphs}I")
    stages, pipelined, step_end = _decode_stages(r, num_stages, num_ipus, num_subgraphs)
    r.skip_pad8()
    tensors = []
    unpack, end = _unpacker(packed), align(len(tensor_data))
    for i in range(num_tensors):
        dtype, ndim, loc, flags, offset, nbytes, *dims = r.take(_TENSOR)
        stored = flags == TENSOR_STORED_PACKED
        if stored:
            if loc != Location.TENSOR_DATA or dtype != DType.FLOAT32 or offset:
                raise CorruptFileError(f"metadata: tensor {i} is stored packed but not float32")
            flags = 0
        try:
            dt, location = DType(dtype), Location(loc)
            itemsize = np_dtype(dt).itemsize
        except (ValueError, KeyError):
            raise CorruptFileError(f"metadata: tensor {i} has bad dtype/location") from None
        shape = tuple(dims[:ndim])
        numel = 1
        for d in shape:
            numel *= d
        if ndim > MAX_DIMS or flags or any(dims[ndim:]) or any(d < 0 for d in shape):
            raise CorruptFileError(f"metadata: tensor {i} has a bad shape")
        if nbytes != numel * itemsize or offset % ALIGN:
            raise CorruptFileError(f"metadata: tensor {i} has bad nbytes/offset")
        limit = arena_size if location == Location.ARENA else len(tensor_data)
        if offset + nbytes > limit and not stored:
            raise CorruptFileError(f"metadata: tensor {i} lies outside its {location.name} storage")
        payload = (
            tensor_data[offset : offset + nbytes] if location == Location.TENSOR_DATA else None
        )
        if stored:
            payload, offset, end = unpack(i, nbytes), end, align(end + nbytes)
        tensors.append(TensorSpec(f"t{i}", dt, shape, location, offset, payload))
    raw_anchors = [r.take(_ANCHOR) for _ in range(num_anchors)]
    strings = data[r.pos : r.pos + strings_size]
    if len(strings) != strings_size:
        raise CorruptFileError("metadata: string table is truncated")
    r.pos += strings_size
    r.skip_pad8()
    if r.pos != len(data):
        raise CorruptFileError("metadata: trailing bytes")
    anchors = []
    for i, (off, n, direction, tensor, subgraph, flags) in enumerate(raw_anchors):
        if off + n > strings_size or not 1 <= n <= 1024 or tensor >= num_tensors:
            raise CorruptFileError(f"metadata: anchor {i} is out of bounds")
        if direction not in (1, 2) or flags & ~ANCHOR_TENSOR_DATA:
            raise CorruptFileError(f"metadata: anchor {i} has bad direction/flags")
        if subgraph != NO_INDEX and subgraph >= num_subgraphs:
            raise CorruptFileError(f"metadata: anchor {i} has bad subgraph {subgraph}")
        name = strings[off : off + n].decode()
        anchors.append(Anchor(name, Direction(direction), tensor, subgraph, bool(flags)))
        tensors[tensor] = TensorSpec(name, *_fields_after_name(tensors[tensor]))
    if len({a.name for a in anchors}) != len(anchors):
        raise CorruptFileError("metadata: anchor names are not unique")
    if index_anchor != NO_INDEX and index_anchor >= num_anchors:
        raise CorruptFileError("metadata: index_anchor out of range")
    return dict(
        tensors=tuple(tensors),
        anchors=tuple(anchors),
        load_program=load_program,
        main_programs=tuple(mains),
        arena_size=arena_size,
        index_anchor=index_anchor,
        ipu_version=ipu_version,
        num_ipus=num_ipus,
        replication_factor=replication,
        batches_per_step=bps,
        num_io_tiles=io_tiles,
        stages=stages,
        pipelined=pipelined,
        step_end_program=step_end,
    )


def _decode_stages(
    r: _Reader, num_stages: int, num_ipus: int, num_subgraphs: int
) -> tuple[tuple[Stage, ...], bool, int]:
    """The stage table after main_programs (present when num_stages > 0)."""
    if num_stages == 0:
        return (), False, NO_INDEX
    if num_subgraphs != 1:
        raise CorruptFileError("metadata: a sharded model has exactly one subgraph")
    (flags,) = r.take("<I")
    if flags & ~(STAGES_PIPELINED | STAGES_STEP_END):
        raise CorruptFileError(f"metadata: unknown stage flags {flags:#x}")
    stages = []
    for k in range(num_stages):
        program, ipu, copy_program = r.take("<3I")
        if ipu >= num_ipus:
            raise CorruptFileError(
                f"metadata: stage {k} is on IPU {ipu} but num_ipus is {num_ipus}"
            )
        stages.append(Stage(program, ipu, copy_program))
    step_end = r.take("<I")[0] if flags & STAGES_STEP_END else NO_INDEX
    return tuple(stages), bool(flags & STAGES_PIPELINED), step_end


def _fields_after_name(t: TensorSpec) -> tuple:
    return (t.dtype, t.shape, t.location, t.offset, t.data)


def decode_blobs(blobs: list[Blob]) -> ModelIR:
    metas = [b for b in blobs if b[0] == BLOB_METADATA]
    datas = [b for b in blobs if b[0] == BLOB_TENSOR_DATA]
    if len(metas) != 1 or len(datas) > 1:
        raise CorruptFileError(
            "a container needs exactly one METADATA and at most one TENSOR_DATA blob"
        )
    # bytes() of a bytes payload is the same object: no copy unless a blob is a memoryview
    packs = [b for b in blobs if b[0] == BLOB_OPAQUE and b[2] == PACKED_BLOB]
    meta = decode_metadata(
        bytes(metas[0][3]),
        bytes(datas[0][3]) if datas else b"",
        bytes(packs[0][3]) if packs else None,
    )
    n = len(meta["tensors"])
    programs = [decode_program(b[1], bytes(b[3]), n) for b in blobs if b[0] == BLOB_PROGRAM]
    ids = [p.id for p in programs]
    if len(set(ids)) != len(ids):
        raise CorruptFileError("duplicate program ids")
    for pid in (meta["load_program"], *meta["main_programs"]):
        if pid not in ids:
            raise CorruptFileError(f"metadata names program {pid}, which the container lacks")
    for k, st in enumerate(meta["stages"]):
        copy = () if st.copy_program == NO_INDEX else (st.copy_program,)
        if any(pid not in ids for pid in (st.program, *copy)):
            raise CorruptFileError(f"metadata: stage {k} names a program the container lacks")
        for pid in copy:
            prog = next(p for p in programs if p.id == pid)
            if any(ins.op != Op.COPY for ins in prog.instrs):
                raise CorruptFileError(f"metadata: copy program {pid} of stage {k} holds non-COPY")
    opaque = tuple(
        (b[2] or "", bytes(b[3]))
        for b in blobs
        if b[0] == BLOB_OPAQUE and b[2] not in _DERIVED_BLOBS
    )
    return sources.named(ModelIR(programs=tuple(programs), opaque=opaque, **meta))


def stored_packed(blobs: list[Blob]) -> dict[int, int]:
    """{tensor index: bytes} of the tensors a container stores only packed (from its METADATA)."""
    (meta,) = [b[3] for b in blobs if b[0] == BLOB_METADATA]
    head = _META_HEAD.unpack_from(meta)
    num_tensors, num_subgraphs, num_stages = head[5], head[7], head[12]
    at = _META_HEAD.size + 4 * num_subgraphs
    if num_stages:
        (flags,) = struct.unpack_from("<I", meta, at)
        at += 4 + 12 * num_stages + (4 if flags & STAGES_STEP_END else 0)
    at = align(at, 8)
    out = {}
    for i in range(num_tensors):
        _dt, _nd, _loc, flags, _off, nbytes, *_ = _TENSOR.unpack_from(meta, at + i * _TENSOR.size)
        if flags & TENSOR_STORED_PACKED:
            out[i] = nbytes
    return out


def decode(data: bytes) -> ModelIR:
    """The ModelIR of a container image (bytes of a .popef file written by pyipu).

    Malformed input raises pyipu.errors.CorruptFileError (a ValueError), VersionError for
    another format version."""
    try:
        return decode_blobs(split_container(bytes(data)))
    except UnicodeDecodeError as e:
        raise CorruptFileError(f"container: a name is not valid UTF-8 ({e.reason})") from None
