"""Fail when a source file (Python, C, Cython) is longer than the limit (800 lines).

Exceptions live in tools/file_length_allow.txt, one per line:

    path/from/the/root  MAX_LINES  # why this file stays long

An allowed file may not grow past MAX_LINES, and an entry whose file is gone or back under the
limit is an error too, so the list only shrinks. Files are the ones git lists (tracked, and
untracked but not ignored); outside a git checkout every file under the root counts, hidden
directories aside.

    python tools/check_file_length.py [--root DIR] [--limit N] [--allow FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

LIMIT = 800
SUFFIXES = frozenset({".py", ".pyi", ".c", ".h", ".pyx", ".pxi", ".pxd"})
ALLOW_FILE = "tools/file_length_allow.txt"


def source_files(root: Path) -> list[str]:
    """Paths (relative, '/'-separated) of the files to check, sorted."""
    git = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        out = subprocess.run(git, capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout, or no git
        names = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            rel = Path(d).relative_to(root)
            names += [(rel / f).as_posix() for f in files]
    return sorted(n for n in names if Path(n).suffix in SUFFIXES and (root / n).is_file())


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def read_allow_list(path: Path) -> tuple[dict[str, int], list[str]]:
    """({path: max lines}, problems): each entry needs a line count and a reason."""
    allowed: dict[str, int] = {}
    problems: list[str] = []
    if not path.is_file():
        return allowed, problems
    for k, raw in enumerate(path.read_text().splitlines(), start=1):
        entry, _, reason = raw.partition("#")
        if not entry.strip():
            continue  # blank or comment line
        fields = entry.split()
        where = f"{path.name}:{k}"
        if len(fields) != 2 or not fields[1].isdigit():
            problems.append(f"{where}: expected 'PATH MAX_LINES  # reason', got {raw.strip()!r}")
        elif not reason.strip():
            problems.append(f"{where}: {fields[0]} needs a reason after '#'")
        elif fields[0] in allowed:
            problems.append(f"{where}: {fields[0]} is listed twice")
        else:
            allowed[fields[0]] = int(fields[1])
    return allowed, problems


def check(root: Path, limit: int, allow_path: Path) -> list[str]:
    """Every problem found, as messages; empty when the tree passes."""
    allowed, problems = read_allow_list(allow_path)
    files = set(source_files(root))
    for name in sorted(files):
        n = count_lines(root / name)
        cap = allowed.get(name)
        if cap is None and n > limit:
            problems.append(
                f"{name}: {n} lines (limit {limit}): split it, or list it in {ALLOW_FILE}"
            )
        elif cap is not None and n > cap:
            problems.append(f"{name}: {n} lines, more than the {cap} its allow-list entry grants")
        elif cap is not None and n <= limit:
            problems.append(f"{name}: {n} lines, within the limit: drop its allow-list entry")
    for name in sorted(set(allowed) - files):
        problems.append(f"{name}: on the allow-list but not a checked source file")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    p.add_argument("--limit", type=int, default=LIMIT)
    p.add_argument("--allow", type=Path, help=f"allow-list (default ROOT/{ALLOW_FILE})")
    args = p.parse_args(argv)
    root = args.root.resolve()
    allow = args.allow if args.allow is not None else root / ALLOW_FILE
    problems = check(root, args.limit, allow)
    for msg in problems:
        print(msg, file=sys.stderr)
    allowed, _ = read_allow_list(allow)
    print(
        f"{len(source_files(root))} source files, limit {args.limit} lines, "
        f"{len(allowed)} on the allow-list: {'FAIL' if problems else 'ok'}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
