"""Write the fuzz seed corpus (tests/fuzz/corpus/) from small models compiled by pyipu.

    python -P tests/fuzz/make_seeds.py          # rewrites corpus/{container,metadata,bytecode}

Each model gives up to three seeds: the whole container (fuzz_container), its METADATA blob
(fuzz_metadata: program ids must be below 8 and the tensor data at most 4 KiB, what the harness
supplies) and its blobs cut into length-prefixed sections (fuzz_bytecode: program ids 0..n-1).
The output is deterministic, so a rerun shows in `git status` only when the compiler changed.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the model builders

import models  # noqa: E402
from test_sharding import compile_sharded, mlp  # noqa: E402

from pyipu import _core  # noqa: E402
from pyipu.compiler import Compiler, CompilerOptions, fuse_models  # noqa: E402
from pyipu.compiler.executable import Executable  # noqa: E402
from pyipu.compiler.variables import set_variables  # noqa: E402

METADATA, TENSOR_DATA, PROGRAM = 1, 2, 3
META_MAX_PROGRAM_ID = 8  # fuzz_metadata.c: NUM_PROGRAMS
META_MAX_TENSOR_DATA = 4096  # fuzz_metadata.c: TENSOR_DATA_BYTES
BYTECODE_MAX_PROGRAMS = 16  # fuzz_bytecode.c: MAX_PROGRAMS


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _one(op: str, inputs: list[np.ndarray], attrs: dict | None = None, **kw) -> onnx.ModelProto:
    return models.single_node(op, inputs, attrs, **kw)


def seed_models() -> dict[str, Callable[[], Executable]]:
    """Small models covering the container features and most opcodes."""
    idx = np.array([[0, 2], [1, 0]], dtype=np.int64)
    one_op: dict[str, onnx.ModelProto] = {
        "conv": _one(
            "Conv",
            [_f32(1, 2, 5, 5)],
            {"pads": [1, 1, 1, 1]},
            const_inputs={1: _f32(3, 2, 3, 3, seed=1), 2: _f32(3, seed=2)},
        ),
        "maxpool": _one("MaxPool", [_f32(1, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        "matmul_i32": _one("MatMul", [np.ones((3, 4), np.int32), np.ones((4, 2), np.int32)]),
        "gemm": _one("Gemm", [_f32(2, 3)], {"transB": 1}, const_inputs={1: _f32(4, 3)}),
        "div_i64": _one("Div", [np.ones((2, 3), np.int64), np.ones((1, 3), np.int64)]),
        "gather": _one("Gather", [_f32(4, 3), idx], {"axis": 0}),
        "gather_nd": _one("GatherND", [_f32(3, 3), np.array([[0, 1], [2, 2]], np.int64)]),
        "scatter": _one(
            "ScatterElements", [_f32(3, 3), np.array([[1, 0, 2]], np.int64), _f32(1, 3)]
        ),
        "topk": _one(
            "TopK", [_f32(2, 5)], const_inputs={1: np.array([2], np.int64)}, num_outputs=2
        ),
        "reduce": _one("ReduceMax", [_f32(2, 3, 4)], {"axes": [1]}, opset=13),
        "argmax": _one("ArgMax", [_f32(3, 4)], {"axis": 1}),
        "softmax": _one("Softmax", [_f32(2, 5)]),
        "cast": _one("Cast", [_f32(2, 3)], {"to": onnx.TensorProto.INT16}),
        "where": _one("Where", [np.array([True, False]), _f32(2, 2), _f32(2, 2, seed=1)]),
        "transpose": _one("Transpose", [_f32(2, 3, 4)], {"perm": [2, 0, 1]}),
        "concat": _one("Concat", [_f32(2, 2), _f32(2, 3)], {"axis": 1}),
        "cumsum": _one("CumSum", [_f32(2, 4)], const_inputs={1: np.array(1, np.int64)}),
        "sigmoid_f16": _one("Sigmoid", [_f32(2, 3).astype(np.float16)]),
        "resize": _one(
            "Resize",
            [_f32(1, 1, 2, 2)],
            {"mode": "linear"},
            const_inputs={1: None, 2: np.array([1, 1, 2, 2], np.float32)},
        ),
    }
    out: dict[str, Callable[[], Executable]] = {
        name: (lambda m=m: Compiler.compile(m)) for name, m in one_op.items()
    }
    out["add_reshape"] = lambda: Compiler.compile(models.fusion_model0())
    out["concat_f16"] = lambda: Compiler.compile(models.fusion_model1())
    out["scale"] = lambda: Compiler.compile(models.scale_model())
    out["fused"] = lambda: Compiler.compile(
        fuse_models([models.fusion_model0(), models.scale_model()])
    )
    out["sharded_pipelined"] = lambda: compile_sharded(True, 3, mlp(8))
    out["variables"] = lambda: Compiler.compile(_variables_model())
    out["step_end"] = lambda: Compiler.compile(models.step_end_model(), None, _pipelined(2))
    return out


def _pipelined(bps: int) -> CompilerOptions:
    o = CompilerOptions()
    o.virtual_graph_mode, o.num_ipus, o.enable_pipelining, o.batches_per_step = (
        "manual",
        2,
        True,
        bps,
    )
    return o


def _variables_model() -> onnx.ModelProto:
    """Y = X + W with W a variable (updated to W + X each step: a Load COPY, a Main COPY)."""
    m = _one("Add", [_f32(2, 3)], const_inputs={1: _f32(2, 3, seed=1)})
    g = m.graph
    g.node.append(onnx.helper.make_node("Add", [g.node[0].input[1], g.input[0].name], ["W_new"]))
    set_variables(m, {g.node[0].input[1]: "W_new"})
    return m


def _sections(parts: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(p)) + p for p in parts)


def seeds_of(image: bytes) -> dict[str, bytes]:
    """{target: seed bytes} for one container image."""
    c = _core.Container.from_bytes(image)
    blobs = c.blobs()
    data = {i: c.blob_bytes(i) for i in range(len(blobs))}
    meta = next(data[i] for i, b in enumerate(blobs) if b[0] == METADATA)
    tdata = next((data[i] for i, b in enumerate(blobs) if b[0] == TENSOR_DATA), b"")
    progs = {b[1]: data[i] for i, b in enumerate(blobs) if b[0] == PROGRAM}
    out = {"container": image}
    if max(progs) < META_MAX_PROGRAM_ID and len(tdata) <= META_MAX_TENSOR_DATA:
        out["metadata"] = meta
    if sorted(progs) == list(range(len(progs))) and len(progs) <= BYTECODE_MAX_PROGRAMS:
        out["bytecode"] = _sections([meta, tdata] + [progs[k] for k in sorted(progs)])
    return out


def main() -> None:
    for target in ("container", "metadata", "bytecode"):
        d = HERE / "corpus" / target
        d.mkdir(parents=True, exist_ok=True)
        for f in d.iterdir():
            f.unlink()
    for name, build in seed_models().items():
        for target, blob in seeds_of(build().to_bytes()).items():
            (HERE / "corpus" / target / f"{name}.bin").write_bytes(blob)
    for target in ("container", "metadata", "bytecode"):
        files = list((HERE / "corpus" / target).iterdir())
        total = sum(f.stat().st_size for f in files)
        print(f"corpus/{target}: {len(files)} seeds, {total} bytes")


if __name__ == "__main__":
    main()
