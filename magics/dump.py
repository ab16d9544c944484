"""`%ipu dump`: popef_dump's view of a PopEF file as HTML tables."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

from . import html as H


@dataclass
class DumpResult:
    """A PopEF file's contents (`description`: pyipu.cli.popef_dump.PopefDescription)."""

    name: str
    description: Any
    instructions: bool = False

    def _repr_html_(self) -> str:
        d = self.description
        info = d.info
        io_tiles = info["num_io_tiles"]
        head = [
            ("file", f"{d.file_size:,} bytes, PopEF format {d.format_version}"),
            ("compiler hash", f"{d.compiler_hash:#018x}"),
            (
                "target",
                f"{d.target}, {info['num_ipus']} IPU(s), replication {info['replication_factor']}",
            ),
            ("batches_per_step", info["batches_per_step"]),
            ("num_io_tiles", f"{io_tiles}{' (overlap I/O)' if io_tiles else ''}"),
            ("arena", H.size(info["arena_size"])),
        ]
        anchors = [
            (
                direction,
                name,
                dtype,
                shape,
                H.size(nbytes),
                "all" if sub is None else sub,
                "yes" if data else "",
            )
            for direction, name, dtype, shape, nbytes, sub, data in d.anchors
        ]
        parts = [
            f'<div class="ipu-dump"><b>PopEF {H.esc(self.name)}</b>',
            H.pairs(head),
            H.section(
                f"Anchors ({len(anchors)})",
                H.table(
                    ("", "name", "dtype", "shape", "bytes", "subgraph", "tensor data"),
                    anchors,
                    "ipu-anchors",
                ),
            ),
        ]
        if d.stages:
            parts.append(
                H.section(
                    "Stages",
                    H.table(
                        ("stage", "program", "IPU", "copy program"),
                        [(k, pid, ipu, copy) for k, (pid, ipu, copy) in enumerate(d.stages)],
                    ),
                )
            )
        parts.append(
            H.section(
                "Programs",
                H.table(
                    ("program", "role", "instructions"),
                    [(pid, role, len(instrs)) for pid, role, instrs in d.programs],
                ),
            )
        )
        if self.instructions:
            for pid, role, instrs in d.programs:
                parts.append(
                    H.section(
                        f"Program {pid} ({role})",
                        H.table(
                            ("#", "op", "inputs", "outputs", "attrs"),
                            [(i, *ins) for i, ins in enumerate(instrs)],
                        ),
                    )
                )
        parts.append(
            H.section(
                "Blobs",
                H.table(
                    ("#", "type", "id / name", "bytes"),
                    [(i, t, ident, f"{size:,}") for i, (t, ident, size) in enumerate(d.blobs)],
                ),
            )
        )
        total = sum(a[4] for a in d.weights)
        parts.append(
            f"<div>Tensor data: {len(d.weights)} tensors, {H.size(total)}; packed "
            f"operands: {d.packed[0]} mapped from the file, {d.packed[1]} at load</div>"
        )
        return "".join(parts) + "</div>"


def dump(token: str, value: Any, instructions: bool) -> DumpResult:
    """Describe a PopEF path, or an Executable (written to a temporary file first)."""
    from IPython.core.error import UsageError

    from pyipu.cli.popef_dump import describe
    from pyipu.errors import Error

    if isinstance(value, (str, os.PathLike)):
        try:
            return DumpResult(token, describe(os.fspath(value)), instructions)
        except (Error, OSError) as e:
            raise UsageError(f"{token!r} is not a valid PopEF file: {e}") from None
    with tempfile.TemporaryDirectory(prefix="pyipu-dump-") as tmp:
        path = os.path.join(tmp, "executable.popef")
        value.save(path)
        return DumpResult(token, describe(path), instructions)
