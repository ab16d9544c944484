"""`popef_dump FILE`: what a PopEF file contains (anchors, programs, tensor data, opaque blobs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from pyipu import _core
from pyipu.compiler.serialize import BLOB_METADATA, stored_packed
from pyipu.enums import DType, Op
from pyipu.errors import Error
from pyipu.ipu_targets import TARGETS, TILES_PER_IPU

_BLOB_TYPES = {1: "metadata", 2: "tensor_data", 3: "program", 4: "opaque"}
_TARGETS = {t.ipu_version_number: name for name, t in TARGETS.items()}


@dataclass
class PopefDescription:
    """What a PopEF file contains, as plain data (the text dump and the notebook's HTML tables
    are two views of it)."""

    path: str
    format_version: int
    file_size: int
    compiler_hash: int
    info: dict[str, Any]
    target: str
    # (direction "input"/"output", name, dtype, shape, nbytes, subgraph, has tensor data)
    anchors: list[tuple[str, str, str, list[int], int, int | None, bool]]
    stages: list[tuple[int, int, int | None]]  # (program, IPU, copy program or None)
    load_program: int
    main_programs: list[int]
    # (program id, role, instructions as (op name, inputs, outputs, attrs))
    programs: list[tuple[int, str, list[tuple[str, list[int], list[int], list[int]]]]]
    blobs: list[tuple[str, str, int]]  # (type, id or name, bytes)
    packed: tuple[int, int]  # operands (mapped from the file, packed at load)
    stored_packed: dict[int, int]  # tensors stored only packed: index -> bytes

    @property
    def fused(self) -> bool:
        return int(self.info["num_subgraphs"]) > 1

    @property
    def weights(self) -> list[tuple[str, str, str, list[int], int, int | None, bool]]:
        return [a for a in self.anchors if a[6]]


def describe(path: str) -> PopefDescription:
    """Read and verify a PopEF file; a pyipu.Error subclass if it is not valid."""
    container = _core.Container.open(path)
    exe = _core.Executable(container)
    info = exe.get_info()
    anchors = [
        (
            "input" if direction == 1 else "output",
            name,
            DType(dtype).name.lower(),
            list(shape),
            int(nbytes),
            subgraph,
            bool(has_data),
        )
        for name, direction, dtype, shape, nbytes, subgraph, has_data, _t in exe.anchors()
    ]
    load_id, mains = exe.program_flow()
    roles = {load_id: "load"}
    stages = exe.stages()
    for k, (pid, _ipu, copy_id) in enumerate(stages):
        roles[pid] = f"stage {k}"
        if copy_id is not None:
            roles[copy_id] = f"copies of stage {k}"
    programs = [
        (
            pid,
            roles.get(pid, "main"),
            [
                (Op(op).name.lower(), list(ins), list(outs), list(attrs))
                for op, ins, outs, attrs in instrs
            ],
        )
        for pid, instrs in exe.programs()
    ]
    blobs = []
    blist = container.blobs()
    for btype, bid, name, size in blist:
        ident = f"id={bid}" if btype == 3 else (f"name={name!r}" if name else "")
        blobs.append((_BLOB_TYPES.get(btype, str(btype)), ident, int(size)))
    return PopefDescription(
        path=path,
        format_version=container.format_version,
        file_size=container.file_size,
        compiler_hash=container.compiler_hash,
        info=dict(info),
        target=_TARGETS.get(info["ipu_version"], str(info["ipu_version"])),
        anchors=anchors,
        stages=stages,
        load_program=load_id,
        main_programs=list(mains),
        programs=programs,
        blobs=blobs,
        packed=tuple(exe.packed_counts()),  # type: ignore[arg-type]
        stored_packed=stored_packed(
            [
                (BLOB_METADATA, 0, None, container.blob_bytes(i))
                for i, b in enumerate(blist)
                if b[0] == BLOB_METADATA
            ]
        ),
    )


def dump(
    path: str, out: TextIO | None = None, show_instructions: bool = False, show_report: bool = False
) -> None:
    out = out or sys.stdout  # looked up per call: a default bound at import misses redirections
    d = describe(path)
    info = d.info
    w = out.write
    w(f"PopEF file: {path}\n")
    w(f"  format version {d.format_version}, {d.file_size} bytes, ")
    w(f"compiler hash {d.compiler_hash:#018x}\n")
    w(f"Target: {d.target}, {info['num_ipus']} IPU(s), replication {info['replication_factor']}, ")
    w(f"batches_per_step {info['batches_per_step']}, num_io_tiles {info['num_io_tiles']}, ")
    w(f"arena {info['arena_size']} bytes\n")
    io_tiles = info["num_io_tiles"]
    w(f"IPU Model: {TILES_PER_IPU} tiles per IPU = {TILES_PER_IPU - io_tiles} compute + ")
    w(f"{io_tiles} I/O tiles{' (overlap I/O)' if io_tiles else ''}\n")

    w(f"Anchors ({len(d.anchors)}):\n")
    for direction, name, dtype, shape, _nbytes, subgraph, has_data in d.anchors:
        kind = f"{direction:<6}"
        extra = " [tensor data]" if has_data else ""
        if d.fused:
            extra += " [all subgraphs]" if subgraph is None else f" [subgraph {subgraph}]"
        w(f"  {kind} {name:<32} {dtype:<8} {shape}{extra}\n")
    if d.fused:
        w(f"Subgraphs ({info['num_subgraphs']}), selected by input 'index':\n")
        for sg in range(info["num_subgraphs"]):
            names = [a[1] for a in d.anchors if a[5] == sg]
            w(f"  subgraph {sg}: {', '.join(names)}\n")

    if d.stages:
        mode = "pipelined" if info["pipelined"] else "sequential"
        w(f"Stages ({len(d.stages)}, {mode}):\n")
        for k, (pid, ipu, copy_id) in enumerate(d.stages):
            w(f"  stage {k}: IPU {ipu}, program {pid}, copies {copy_id}\n")
    w(f"Programs: load={d.load_program}, main={d.main_programs}\n")
    for pid, role, instrs in d.programs:
        w(f"  program {pid} ({role}): {len(instrs)} instructions\n")
        if show_instructions:
            for op, ins, outs, attrs in instrs:
                w(f"    {op:<12} in={ins} out={outs}")
                w(f" attrs={attrs}\n" if attrs else "\n")

    w("Blobs:\n")
    for i, (label, ident, size) in enumerate(d.blobs):
        w(f"  [{i}] {label:<11}{' ' + ident if ident else ''} {size} bytes\n")
    total = sum(a[4] for a in d.weights)
    w(f"Tensor data: {len(d.weights)} tensors, {total} bytes")
    if d.stored_packed:
        n, b = len(d.stored_packed), sum(d.stored_packed.values())
        w(f" ({n} of them, {b} bytes, stored only packed)")
    w("\n")
    mapped, packed = d.packed
    if mapped or packed:
        w(f"Packed operands: {mapped} mapped from the file, {packed} packed at load\n")
    if show_report:
        from pyipu.compiler import Executable

        w(Executable(path).report().summary() + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="popef_dump", description=__doc__)
    p.add_argument("file", help="PopEF file")
    p.add_argument("-i", "--instructions", action="store_true", help="list every instruction")
    p.add_argument(
        "-r", "--report", action="store_true", help="the IPU Model's memory and cycle report"
    )
    args = p.parse_args(argv)
    try:
        dump(args.file, show_instructions=args.instructions, show_report=args.report)
    except (Error, OSError) as e:
        print(f"popef_dump: {args.file}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
