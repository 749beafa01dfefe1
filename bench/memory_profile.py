"""`python -m bench.memory_profile run --config F`: `dispatcher run` with tracemalloc on,
so a benchmark can ask what holds the dispatcher's memory (`BENCH_MEMORY=1`).

Each SIGUSR2 appends one section to bench/results/memory-profile.txt, after a full
garbage collection (what it freed is told): the traced total against the process's
resident set, the lines that hold the most memory, what grew since the previous section
(by line and by call site), each informer cache's objects and bytes, and the counts of
the live container objects by type.
Tracing slows the process and adds its own bookkeeping, so read the sections for where
memory goes, not for the resident set a run without tracing would have.
"""

from __future__ import annotations

import collections
import gc
import os
import runpy
import signal
import sys
import time
import tracemalloc
from pathlib import Path
from types import FrameType

MEMORY_PROFILE = Path(__file__).parent / "results" / "memory-profile.txt"
FRAMES = 6
TOP = 45


class Sections:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.previous: tracemalloc.Snapshot | None = None
        self.written = 0

    def write(self, signum: int, frame: FrameType | None) -> None:
        before_collection = tracemalloc.get_traced_memory()[0]
        garbage = gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        self.written += 1
        traced, peak = tracemalloc.get_traced_memory()
        lines = [f"## section {self.written} at {time.strftime('%H:%M:%S')}",
                 f"traced {traced / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB), "
                 f"resident {_rss_mib():.1f} MiB; a full garbage collection just before "
                 f"found {garbage} unreachable objects holding "
                 f"{(before_collection - traced) / 2**20:.1f} MiB", "", "### by line"]
        lines += [_stat(s) for s in snapshot.statistics("lineno")[:TOP]]
        if self.previous is not None:
            lines += ["", "### grown since the previous section, by line"]
            lines += [_stat(s) for s in snapshot.compare_to(self.previous, "lineno")[:TOP]]
            lines += ["", "### grown since the previous section, by where it was called from"]
            for stat in snapshot.compare_to(self.previous, "traceback")[:8]:
                lines.append(_stat(stat))
                lines += [f"      {frame_line}" for frame_line in stat.traceback.format()]
        lines += ["", "### informer caches: objects, bytes held (each object counted once)"]
        lines += _caches()
        lines += ["", "### live container objects by type"]
        kinds = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        lines += [f"{count:>10}  {kind}" for kind, count in kinds.most_common(TOP)]
        with self.out.open("a") as out:
            out.write("\n".join(lines) + "\n\n")
        self.previous = snapshot


def _caches() -> list[str]:
    informer = sys.modules.get("dispatcher.kube.informer")
    if informer is None:
        return []
    lines = []
    for cache in (o for o in gc.get_objects() if isinstance(o, informer.Informer)):
        held = _deep_size(cache.store)
        each = held / len(cache.store) if cache.store else 0
        lines.append(f"{len(cache.store):>8} objects {held / 1024:>10.0f} KiB "
                     f"({each:.0f} B each)  {cache.name}")
    return sorted(lines, reverse=True)


def _deep_size(root: object) -> int:
    """The bytes of `root` and of everything it holds, each object once."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return total


def _stat(stat: tracemalloc.Statistic | tracemalloc.StatisticDiff) -> str:
    frame = stat.traceback[0]
    grown = (f" ({stat.size_diff / 1024:+.0f} KiB, {stat.count_diff:+} blocks)"
             if isinstance(stat, tracemalloc.StatisticDiff) else "")
    return (f"{stat.size / 1024:>10.0f} KiB {stat.count:>8} blocks{grown}  "
            f"{frame.filename}:{frame.lineno}")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    tracemalloc.start(FRAMES)
    MEMORY_PROFILE.parent.mkdir(parents=True, exist_ok=True)
    with MEMORY_PROFILE.open("a") as out:
        out.write(f"# dispatcher {' '.join(sys.argv[1:])}, pid {os.getpid()}, "
                  f"started {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n")
    signal.signal(signal.SIGUSR2, Sections(MEMORY_PROFILE).write)
    sys.argv = ["dispatcher", *sys.argv[1:]]
    runpy.run_module("dispatcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
