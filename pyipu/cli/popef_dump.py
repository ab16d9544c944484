"""`popef_dump FILE`: what a PopEF file contains (anchors, programs, tensor data, opaque blobs)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pyipu import _core
from pyipu.enums import DType, Op
from pyipu.errors import Error
from pyipu.ipu_targets import TARGETS, TILES_PER_IPU

_BLOB_TYPES = {1: "metadata", 2: "tensor_data", 3: "program", 4: "opaque"}
_TARGETS = {t.ipu_version_number: name for name, t in TARGETS.items()}


def dump(
    path: str, out: TextIO | None = None, show_instructions: bool = False, show_report: bool = False
) -> None:
    out = out or sys.stdout  # looked up per call: a default bound at import misses redirections
    container = _core.Container.open(path)
    exe = _core.Executable(container)
    info = exe.get_info()
    w = out.write
    w(f"PopEF file: {path}\n")
    w(f"  format version {container.format_version}, {container.file_size} bytes, ")
    w(f"compiler hash {container.compiler_hash:#018x}\n")
    target = _TARGETS.get(info["ipu_version"], str(info["ipu_version"]))
    w(f"Target: {target}, {info['num_ipus']} IPU(s), replication {info['replication_factor']}, ")
    w(f"batches_per_step {info['batches_per_step']}, num_io_tiles {info['num_io_tiles']}, ")
    w(f"arena {info['arena_size']} bytes\n")
    io_tiles = info["num_io_tiles"]
    w(f"IPU Model: {TILES_PER_IPU} tiles per IPU = {TILES_PER_IPU - io_tiles} compute + ")
    w(f"{io_tiles} I/O tiles{' (overlap I/O)' if io_tiles else ''}\n")

    anchors = exe.anchors()
    fused = info["num_subgraphs"] > 1
    w(f"Anchors ({len(anchors)}):\n")
    for name, direction, dtype, shape, _nbytes, subgraph, has_data, _t in anchors:
        kind = "input " if direction == 1 else "output"
        extra = " [tensor data]" if has_data else ""
        if fused:
            extra += " [all subgraphs]" if subgraph is None else f" [subgraph {subgraph}]"
        w(f"  {kind} {name:<32} {DType(dtype).name.lower():<8} {list(shape)}{extra}\n")
    if fused:
        w(f"Subgraphs ({info['num_subgraphs']}), selected by input 'index':\n")
        for sg in range(info["num_subgraphs"]):
            names = [a[0] for a in anchors if a[5] == sg]
            w(f"  subgraph {sg}: {', '.join(names)}\n")

    load_id, mains = exe.program_flow()
    roles = {load_id: "load"}
    stages = exe.stages()
    if stages:
        mode = "pipelined" if info["pipelined"] else "sequential"
        w(f"Stages ({len(stages)}, {mode}):\n")
        for k, (pid, ipu, copy_id) in enumerate(stages):
            w(f"  stage {k}: IPU {ipu}, program {pid}, copies {copy_id}\n")
            roles[pid] = f"stage {k}"
            roles[copy_id] = f"copies of stage {k}"
    w(f"Programs: load={load_id}, main={mains}\n")
    for pid, instrs in exe.programs():
        role = roles.get(pid, "main")
        w(f"  program {pid} ({role}): {len(instrs)} instructions\n")
        if show_instructions:
            for op, ins, outs, attrs in instrs:
                w(f"    {Op(op).name.lower():<12} in={list(ins)} out={list(outs)}")
                w(f" attrs={list(attrs)}\n" if attrs else "\n")

    w("Blobs:\n")
    for i, (btype, bid, name, size) in enumerate(container.blobs()):
        label = _BLOB_TYPES.get(btype, str(btype))
        ident = f" id={bid}" if btype == 3 else (f" name={name!r}" if name else "")
        w(f"  [{i}] {label:<11}{ident} {size} bytes\n")
    weights = [a for a in anchors if a[6]]
    total = sum(a[4] for a in weights)
    w(f"Tensor data: {len(weights)} tensors, {total} bytes\n")
    mapped, packed = exe.packed_counts()
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
