"""Shared helpers for the histaudit benchmarks: timing, ratio statistics, machine facts.

The machine the benchmarks run on is shared and noisy, so nothing here produces an
absolute pass/fail. Every figure is a *ratio* of the thing measured to a baseline
measured in the same run, and each round measures baseline and subject back to back
(interleaved), so slow phases of the machine hit both sides of a ratio alike.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


def add_repo_paths() -> None:
    """Make ``src`` (histaudit) and ``tests`` (tests.support.postgres) importable."""
    for p in (REPO / "src", REPO / "tests", REPO):
        s = str(p)
        if s not in sys.path:
            sys.path.insert(0, s)


@dataclass
class Timing:
    """Wall and process-CPU seconds for ``ops`` operations."""

    ops: int
    wall: float
    cpu: float

    @property
    def rate(self) -> float:
        """Operations per wall-clock second."""
        return self.ops / self.wall if self.wall > 0 else float("nan")

    @property
    def per_op(self) -> float:
        return self.wall / self.ops if self.ops else float("nan")

    @property
    def cpu_rate(self) -> float:
        """Operations per CPU-second of this process (a per-core rate)."""
        return self.ops / self.cpu if self.cpu > 0 else float("nan")

    def to_json(self) -> dict[str, float]:
        return {"ops": self.ops, "wall_s": round(self.wall, 6), "cpu_s": round(self.cpu, 6),
                "rate_per_s": round(self.rate, 3), "per_op_us": round(self.per_op * 1e6, 3),
                "cpu_rate_per_s": round(self.cpu_rate, 3)}


def measure(fn: Callable[[], int]) -> Timing:
    """Run ``fn`` once; it returns how many operations it did."""
    c0, t0 = time.process_time(), time.perf_counter()
    ops = fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return Timing(ops, t1 - t0, c1 - c0)


@dataclass
class Series:
    """One value per round, summarised by its median and spread."""

    values: list[float] = field(default_factory=list)

    def add(self, v: float) -> None:
        self.values.append(v)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def to_json(self, digits: int = 4) -> dict[str, Any]:
        return {"median": round(self.median, digits),
                "min": round(min(self.values), digits) if self.values else None,
                "max": round(max(self.values), digits) if self.values else None,
                "rounds": [round(v, digits) for v in self.values]}


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fs_type(path: Path) -> str:
    try:
        out = subprocess.run(["df", "-PT", str(path)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return out[-1].split()[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def git_dirty(path: str = "src") -> list[str]:
    """Files under ``path`` that differ from HEAD (others edit the tree while we measure)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", path], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        return [line[3:] for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.CalledProcessError):
        return ["unknown"]


def versions() -> dict[str, str]:
    import sqlite3

    import cryptography
    import orjson
    import sqlalchemy

    out = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
           "cryptography": cryptography.__version__, "sqlalchemy": sqlalchemy.__version__,
           "orjson": orjson.__version__}
    try:
        import psycopg
        out["psycopg"] = psycopg.__version__
    except ImportError:
        pass
    return out


def fmt_num(x: float | None, unit: str = "") -> str:
    if x is None or x != x:  # NaN
        return "-"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.3g}"
    return s + unit


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(out)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
