"""/proc readings shared by the benches that watch whole process trees (live_bench, load_bench)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def load_average() -> float:
    """The 1-minute load average: printed beside every figure taken on a shared machine."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def descendants(pid: int) -> set[int]:
    """Every live descendant of pid (from /proc), whatever its process group."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
