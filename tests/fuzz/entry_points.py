"""The Python entry points under fuzzing, shared by the atheris target (fuzz_python.py) and the
hypothesis tests (tests/test_fuzz_python.py). Each lets only pyipu.Error through, so anything
else that escapes is a finding. `mutate` is the structure-aware mutator of the reference
interpreter's target: it edits a decoded model, and pyipu's writer encodes the result."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

import pyipu
from pyipu import runtime
from pyipu.compiler import Compiler
from pyipu.compiler.executable import Executable
from pyipu.compiler.ir import (
    NO_INDEX,
    OP_ARITY,
    Direction,
    Location,
    ModelIR,
    TensorSpec,
    np_dtype,
)
from pyipu.compiler.serialize import encode_container
from pyipu.enums import Op


def compile_onnx(data: bytes) -> None:
    """Compile ONNX bytes; what the compiler produced must then load."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exe = Compiler.compile(data)
        runtime.Runner(exe).close()
    except pyipu.Error:
        pass


def load_popef(data: bytes, path: Path | None = None) -> None:
    """Load a PopEF image: the C reader and verifier (runtime.Runner), the pure-Python decoder,
    and, given a path, the memory-mapped file."""
    try:
        runtime.Runner(data).close()
    except pyipu.Error:
        pass
    try:
        Executable.from_bytes(data).program  # noqa: B018 - the pure-Python decoder
    except pyipu.Error:
        pass
    if path is not None:
        path.write_bytes(data)
        try:
            Executable.open(path)
        except pyipu.Error:
            pass


# ---- the reference interpreter on semantically edited models ------------------------------

MAX_ARENA = 64 << 20  # larger arenas are verified but not run (the harness's memory)


def mutate(ir: ModelIR, choose: Callable[[int], int], edits: int) -> ModelIR:
    """`ir` with `edits` semantic edits, as fuzz_semantic.c makes them: roles pointed at other
    anchors or programs (index, Load, Main, stage), directions and locations flipped, tensors
    aliased, instructions dropped, swapped, moved, duplicated or given other operands,
    attributes or opcodes. `choose(n)` picks a number in [0, n)."""
    for _ in range(edits):
        ir = _edit(ir, choose)
    return ir


def _pick(choose: Callable[[int], int], n: int) -> int:
    return choose(n) if n > 0 else 0


def _edit(ir: ModelIR, choose: Callable[[int], int]) -> ModelIR:
    tensors, anchors, programs = list(ir.tensors), list(ir.anchors), list(ir.programs)
    nt, na, np_ = len(tensors), len(anchors), len(programs)
    pid = programs[_pick(choose, np_)].id if np_ else 0
    kind = choose(15)
    if kind == 14 and ir.stages:  # a stage's compute or copy program
        stages = list(ir.stages)
        k = choose(len(stages))
        field = "copy_program" if choose(2) else "program"
        stages[k] = dataclasses.replace(stages[k], **{field: pid})
        return dataclasses.replace(ir, stages=tuple(stages))
    if kind == 0:
        index = NO_INDEX if choose(4) == 0 or not na else choose(na)
        return dataclasses.replace(ir, index_anchor=index)
    if kind == 1:
        return dataclasses.replace(ir, load_program=pid)
    if kind == 2:
        mains = list(ir.main_programs)
        mains[_pick(choose, len(mains))] = pid
        return dataclasses.replace(ir, main_programs=tuple(mains))
    if kind in (3, 4, 5) and na:
        a = choose(na)
        anchor = anchors[a]
        if kind == 3:
            flipped = Direction.OUTPUT if anchor.direction == Direction.INPUT else Direction.INPUT
            anchor = dataclasses.replace(anchor, direction=flipped)
        elif kind == 4:
            anchor = dataclasses.replace(anchor, has_tensor_data=not anchor.has_tensor_data)
            if choose(2) and anchor.tensor < nt:  # its tensor's location to match
                loc = Location.TENSOR_DATA if anchor.has_tensor_data else Location.ARENA
                tensors[anchor.tensor] = _moved(tensors[anchor.tensor], loc, 0)
        else:
            anchor = dataclasses.replace(anchor, tensor=_pick(choose, nt))
        anchors[a] = anchor
    elif kind in (6, 7) and nt:
        t = choose(nt)
        if kind == 6:
            flipped = (
                Location.ARENA
                if tensors[t].location == Location.TENSOR_DATA
                else Location.TENSOR_DATA
            )
            tensors[t] = _moved(tensors[t], flipped, 0)
        else:
            other = tensors[choose(nt)]
            tensors[t] = _moved(tensors[t], other.location, other.offset)
    elif np_:
        p = choose(np_)
        instrs = list(programs[p].instrs)
        i = _pick(choose, len(instrs))
        if kind == 8 and instrs:
            del instrs[i]
        elif kind == 9 and instrs:
            j = choose(len(instrs))
            instrs[i], instrs[j] = instrs[j], instrs[i]
        elif kind == 10 and instrs:
            to = choose(np_)
            if to != p:
                programs[to] = dataclasses.replace(
                    programs[to], instrs=(*programs[to].instrs, instrs.pop(i))
                )
        elif kind == 11 and instrs:
            ins = instrs[i]
            ops = [*ins.inputs, *ins.outputs]
            if ops:
                ops[choose(len(ops))] = _pick(choose, nt)
                k = len(ins.inputs)
                instrs[i] = dataclasses.replace(ins, inputs=tuple(ops[:k]), outputs=tuple(ops[k:]))
        elif kind == 12 and instrs and instrs[i].attrs:
            attrs = list(instrs[i].attrs)
            attrs[choose(len(attrs))] = choose(8) - 2
            instrs[i] = dataclasses.replace(instrs[i], attrs=tuple(attrs))
        elif kind == 13 and instrs:
            instrs.insert(i, instrs[i])
        elif instrs:  # another opcode with the same operand counts
            ins = instrs[i]
            same = [
                op
                for op, (lo, hi, no) in sorted(OP_ARITY.items())
                if lo <= len(ins.inputs) <= hi and no == len(ins.outputs)
            ]
            instrs[i] = dataclasses.replace(ins, op=Op(same[choose(len(same))]))
        programs[p] = dataclasses.replace(programs[p], instrs=tuple(instrs))
    return dataclasses.replace(
        ir, tensors=tuple(tensors), anchors=tuple(anchors), programs=tuple(programs)
    )


def _moved(t: TensorSpec, location: Location, offset: int) -> TensorSpec:
    data = t.data if location == Location.TENSOR_DATA else None
    return dataclasses.replace(t, location=location, offset=offset, data=data)


def encode_mutated(ir: ModelIR) -> bytes | None:
    """The edited model as a PopEF image written by pyipu's writer (valid checksum), or None
    when the writer refuses it (a typed error: the edit broke a rule the writer checks)."""
    try:
        return encode_container(ir, prepack=False)
    except pyipu.Error:
        return None


def run_reference(data: bytes) -> None:
    """The NumPy reference interpreter on a PopEF image. It must raise a pyipu.Error for an
    image the C verifier rejects, and run one the verifier accepts on zero inputs (or raise a
    pyipu.Error); anything else escapes as a finding."""
    exe = Executable.from_bytes(data)
    try:
        exe.native()
        accepted = True
    except pyipu.Error:
        accepted = False
    if not accepted:
        try:
            exe.run_reference({})
        except pyipu.Error:
            return
        raise AssertionError("the reference interpreter ran an image the verifier rejects")
    model = exe.program
    if model.arena_size > MAX_ARENA:
        return
    index = model.anchors[model.index_anchor] if model.index_anchor != NO_INDEX else None
    inputs = {}
    for a in model.anchors:
        if a.direction == Direction.INPUT and not a.has_tensor_data and a.subgraph in (0, NO_INDEX):
            spec = model.tensors[a.tensor]
            inputs[a.name] = np.zeros(spec.shape, np_dtype(spec.dtype))
    if index is not None:
        spec = model.tensors[index.tensor]
        inputs[index.name] = np.zeros(spec.shape, np_dtype(spec.dtype))
    try:
        exe.run_reference(inputs)
    except pyipu.Error:
        pass
