"""HTML summaries of an Executable: anchors, memory per tile and estimated cycles (IPU Model)."""

from __future__ import annotations

from typing import Any

from . import html as H


def anchors(exe: Any) -> list[tuple[str, Any]]:
    """(direction, DataDesc) of every anchor of an Executable (weights in the PopEF included)."""
    from pyipu.runtime.runner import describe_anchors

    descs, directions = describe_anchors(exe.native())
    return [("input" if k == 1 else "output", d) for d, k in zip(descs, directions, strict=True)]


def anchors_table(exe: Any, fused: bool = False) -> str:
    rows = []
    for direction, d in anchors(exe):
        if d.popef_contains_tensor_data:
            continue
        row = [direction, d.name, d.data_type.name.lower(), list(d.shape), H.size(d.size_in_bytes)]
        if fused:
            row.append("all" if d.subgraph is None else d.subgraph)
        rows.append(row)
    headers = ["", "anchor", "dtype", "shape", "bytes"] + (["subgraph"] if fused else [])
    return H.table(headers, rows, "ipu-anchors")


def memory_rows(report: Any) -> list[tuple[str, Any]]:
    mem = report.memory
    cap = report.target.memory_bytes_per_tile
    used = mem[mem > 0]
    worst = ", ".join(f"IPU {i} tile {t}: {H.size(b)}" for i, t, b in report.worst_tiles(3))
    return [
        ("fits on the IPU", "yes" if report.fits else "NO (compiled for CPU use)"),
        ("tiles used", f"{used.size} of {mem.size}"),
        ("memory used", f"{H.size(int(mem.sum()))} of {H.size(cap * mem.size)}"),
        (
            "per tile (max / mean of used)",
            f"{H.size(int(mem.max()))} / "
            f"{H.size(float(used.mean()) if used.size else 0)} of {H.size(cap)}",
        ),
        ("fullest tiles", worst),
    ]


def cycle_rows(report: Any) -> list[tuple[str, Any]]:
    return [
        ("instructions", len(report.instructions)),
        ("cycles per batch (compute+exchange+sync)", f"{report.batch_cycles:,}"),
        ("host I/O cycles per batch", f"{report.host_io_cycles:,}"),
        ("cycles per step", f"{report.step_cycles:,}"),
        ("estimated latency", H.duration(report.latency_s)),
        ("estimated throughput", f"{report.throughput:,.0f} batches/s"),
    ]


def executable_html(exe: Any, title: str = "Executable") -> str:
    """Anchors, memory per tile and estimated cycles of a compiled executable."""
    report = exe.report()
    info = exe.native().get_info()
    fused = int(info["num_subgraphs"]) > 1
    head = [
        ("target", f"{report.target.ipu_version}, {report.num_ipus} IPU(s)"),
        ("batches_per_step", report.batches_per_step),
        ("num_io_tiles", report.num_io_tiles),
        ("replication_factor", report.replication_factor),
    ]
    if fused:
        head.append(("subgraphs", info["num_subgraphs"]))
    return (
        f'<div class="ipu-summary"><b>{H.esc(title)}</b>'
        + H.pairs(head)
        + H.section("Anchors", anchors_table(exe, fused))
        + H.section("Memory (IPU Model)", H.pairs(memory_rows(report)))
        + H.section("Estimated cycles (IPU Model)", H.pairs(cycle_rows(report)))
        + "</div>"
    )


def register_formatters(ipython: Any) -> None:
    """Show a pyipu Executable as its HTML summary (the core package knows nothing of IPython)."""
    from pyipu.compiler import Executable

    ipython.display_formatter.formatters["text/html"].for_type(Executable, executable_html)


def unregister_formatters(ipython: Any) -> None:
    from pyipu.compiler import Executable

    ipython.display_formatter.formatters["text/html"].pop(Executable, None)
