"""The compiled model: frozen dataclasses mirroring the METADATA and PROGRAM blobs one to one.

`serialize.encode` writes a `ModelIR` as container blobs and `serialize.decode` reads it back; the
NumPy reference interpreter (`pyipu.reference`) executes it. Layouts: ipu_executable.h and
docs/bytecode.md.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from pyipu import _core
from pyipu.enums import DType, Op
from pyipu.ipu_targets import TARGETS

NO_INDEX = 0xFFFFFFFF  # anchor subgraph "all" / metadata index_anchor "not fused"
ALIGN = 64  # arena and TENSOR_DATA offsets, arena size
MAX_DIMS = 8
MAX_ATTRS = 64
# Largest tensor a model may describe: more than an IPU's memory, and what the compiler may have
# to materialise (weights, index tables) must fit on the host compiling it.
MAX_TENSOR_BYTES = 1 << 32
IPU_VERSIONS = {name: t.ipu_version_number for name, t in TARGETS.items()}


class Location(IntEnum):
    ARENA = 1
    TENSOR_DATA = 2


class Direction(IntEnum):
    INPUT = 1
    OUTPUT = 2


# (min_inputs, max_inputs, num_outputs) per opcode, read from runtime_c/include/ipu/ipu_ops.def.
OP_ARITY: dict[int, tuple[int, int, int]] = _core.op_arity()


# dtypes a tensor may have ("all dtypes" in docs/bytecode.md) and the numeric subsets.
FLOAT_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT16})
SIGNED_DTYPES = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED_DTYPES = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
INT_DTYPES = SIGNED_DTYPES | UNSIGNED_DTYPES
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES | {DType.BOOL}

_NUMPY_NAMES = {
    DType.FLOAT32: "float32",
    DType.FLOAT16: "float16",
    DType.FLOAT64: "float64",
    DType.INT8: "int8",
    DType.INT16: "int16",
    DType.INT32: "int32",
    DType.INT64: "int64",
    DType.UINT8: "uint8",
    DType.UINT16: "uint16",
    DType.UINT32: "uint32",
    DType.UINT64: "uint64",
    DType.BOOL: "bool",
}


def np_dtype(dtype: int) -> np.dtype:
    """NumPy dtype of a pyipu (= ONNX TensorProto) dtype number."""
    return np.dtype(_NUMPY_NAMES[DType(dtype)])


def dtype_of(array_dtype: np.dtype) -> DType:
    """pyipu dtype of a NumPy dtype; KeyError if there is none."""
    name = np.dtype(array_dtype).name
    for k, v in _NUMPY_NAMES.items():
        if v == name:
            return DType(k)
    raise KeyError(name)


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def f64_bits(x: float) -> int:
    """An i64 attribute slot holding the IEEE-754 bits of a float64 (GEMM alpha/beta)."""
    return int(struct.unpack("<q", struct.pack("<d", float(x)))[0])


def bits_f64(i: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", int(i)))[0])


@dataclass(frozen=True)
class TensorSpec:
    """One entry of the tensor table. Tensors overlapping in the arena are views of each other.

    `data` holds the bytes of a TENSOR_DATA tensor (its slice of the TENSOR_DATA blob); `name` is
    informational (anchors carry the names that are stored).
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    location: Location = Location.ARENA
    offset: int = 0
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * np_dtype(self.dtype).itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Instr:
    op: Op
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: tuple[int, ...] = ()

    def __str__(self) -> str:
        ins = ", ".join(f"t{i}" for i in self.inputs)
        outs = ", ".join(f"t{i}" for i in self.outputs)
        attrs = f" {list(self.attrs)}" if self.attrs else ""
        return f"{outs} = {Op(self.op).name.lower()}({ins}){attrs}"


@dataclass(frozen=True)
class Anchor:
    name: str
    direction: Direction
    tensor: int
    subgraph: int = 0  # NO_INDEX: belongs to every subgraph
    has_tensor_data: bool = False


@dataclass(frozen=True)
class Program:
    id: int
    instrs: tuple[Instr, ...]


@dataclass(frozen=True)
class Stage:
    """One stage of a sharded model: a compute program on one virtual IPU (manual sharding).

    `copy_program` holds the stage's explicit inter-IPU copies to the next stage (NO_INDEX for the
    last stage). Stages run in order for one batch; with pipelining, stage s works on batch i - s
    while stage 0 works on batch i, and the copy programs run between those compute phases.
    """

    program: int  # program id of the stage's compute program
    ipu: int  # virtual IPU the stage runs on (0 .. num_ipus - 1)
    copy_program: int = NO_INDEX


@dataclass(frozen=True)
class ModelIR:
    """Everything a container holds: target, tensor table, anchors, programs, tensor data."""

    tensors: tuple[TensorSpec, ...]
    anchors: tuple[Anchor, ...]
    programs: tuple[Program, ...]
    load_program: int
    main_programs: tuple[int, ...]
    arena_size: int
    index_anchor: int = NO_INDEX
    ipu_version: int = 2
    num_ipus: int = 1
    replication_factor: int = 1
    batches_per_step: int = 1
    num_io_tiles: int = 0
    opaque: tuple[tuple[str, bytes], ...] = ()
    stages: tuple[Stage, ...] = ()  # empty: not sharded, every program runs on IPU 0
    pipelined: bool = False  # stages of consecutive batches run concurrently
    step_end_program: int = NO_INDEX  # sharded only: runs alone after every step (training)

    @property
    def num_subgraphs(self) -> int:
        return len(self.main_programs)

    def program(self, pid: int) -> Program:
        for p in self.programs:
            if p.id == pid:
                return p
        raise KeyError(f"no program with id {pid}")

    def anchor(self, name: str) -> Anchor:
        for a in self.anchors:
            if a.name == name:
                return a
        raise KeyError(f"no anchor named {name!r}")

    def tensor_data_blob(self, skip: frozenset[int] = frozenset()) -> bytes:
        """The TENSOR_DATA blob: every TENSOR_DATA tensor's bytes at its offset, zero padded
        (but the tensors in `skip`: stored packed)."""
        kept = [
            t
            for i, t in enumerate(self.tensors)
            if t.location == Location.TENSOR_DATA and i not in skip
        ]
        size = max((align(t.offset + t.nbytes) for t in kept), default=0)
        blob = bytearray(size)
        for t in kept:
            if t.data is not None:
                blob[t.offset : t.offset + t.nbytes] = t.data
        return bytes(blob)

    def summary(self) -> str:
        """Human-readable dump: target, anchors, tensors and every program."""
        lines = [
            f"ipu_version={self.ipu_version} num_ipus={self.num_ipus} "
            f"batches_per_step={self.batches_per_step} num_io_tiles={self.num_io_tiles} "
            f"subgraphs={self.num_subgraphs} arena={self.arena_size} bytes",
            "anchors:",
        ]
        for a in self.anchors:
            t = self.tensors[a.tensor]
            sub = "all" if a.subgraph == NO_INDEX else str(a.subgraph)
            data = " (tensor data)" if a.has_tensor_data else ""
            lines.append(
                f"  {a.direction.name.lower():6} {a.name} t{a.tensor} "
                f"{DType(t.dtype).name.lower()}{list(t.shape)} subgraph {sub}{data}"
            )
        lines.append("tensors:")
        for i, t in enumerate(self.tensors):
            lines.append(
                f"  t{i} {t.name} {DType(t.dtype).name.lower()}{list(t.shape)} "
                f"{t.location.name.lower()}@{t.offset}+{t.nbytes}"
            )
        roles = {self.load_program: "load"}
        for k, st in enumerate(self.stages):
            roles[st.program] = f"stage {k} on IPU {st.ipu}"
            roles[st.copy_program] = f"copies of stage {k} to stage {k + 1}"
        if self.step_end_program != NO_INDEX:
            roles[self.step_end_program] = "step end"
        if self.stages:
            mode = "pipelined" if self.pipelined else "sequential"
            lines.append(f"stages: {len(self.stages)} ({mode})")
        for p in self.programs:
            role = roles.get(p.id, "main")
            lines.append(f"program {p.id} ({role}):")
            lines.extend(f"  {ins}" for ins in p.instrs)
        return "\n".join(lines)
