"""The first CPU's fields in /proc/cpuinfo (the dispatch test and tools/perf_table.py read it).

Not named `cpuinfo`: that is py-cpuinfo's module, which pytest-benchmark imports.
"""

from __future__ import annotations

from pathlib import Path


def first_cpu() -> dict[str, str]:
    """Key -> value of the first processor block; empty where /proc/cpuinfo cannot be read."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields
