"""Crash points: the names of the passes a run makes, and the ones the code declares.

A point reached more than once is numbered: ``after:fetch_source#2`` is its second pass
in the clean run's one worker process (:func:`number_points`). Points may also be named
by their aliases — ``before:step:87``, ``after:step:87`` / ``step:87`` for the points
around the workflow's 87th activity (:func:`histaudit.crash.step_aliases`) — and chosen
by glob (``after:*``) or step range (``step:80-90``): :func:`select_points` turns what a
user asks for into the numbered points of the clean run, and :func:`sample_points` picks
a reproducible few of those (``--sample``). :func:`declared_points` reads the app's
source, without running it, for the points it should reach, so a clean run can say which
it never did.
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from histaudit.errors import UsageError

__all__ = ["base_point", "crash_at", "declared_points", "number_points", "point_aliases",
           "sample_points", "select_points", "split_point"]

_STEP_RANGE = re.compile(
    r"(?P<prefix>(?:before:|after:)?step:)(?P<lo>[0-9]{1,6})-(?P<hi>[0-9]{1,6})")

_EFFECT_CALLS = {"side_effect", "once"}


def split_point(point: str) -> tuple[str, int]:
    """``name#3`` → (``name``, 3); ``name`` → (``name``, 1)."""
    name, sep, n = point.rpartition("#")
    if sep and name and n.isdigit() and int(n) >= 1:
        return name, int(n)
    return point, 1


def base_point(point: str) -> str:
    """The point's name without its repeat number."""
    return split_point(point)[0]


def number_points(trace: Iterable[str]) -> list[str]:
    """Trace lines → point names, the n-th pass of a point as ``name#n`` (n ≥ 2)."""
    seen: Counter[str] = Counter()
    out = []
    for name in trace:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def point_aliases(entries: Iterable[tuple[str, tuple[str, ...]]], root: str | None = None
                  ) -> dict[str, str]:
    """Trace entries (point, aliases) → {alias: the numbered point of its first pass}.

    With ``root`` (the run's instance id), a step alias (``step:N``, ``before:step:N``,
    ``after:step:N``) names only task N of the root instance's first generation: children
    and continued generations count their tasks from 1 (or 0) again, so ``step:2`` would
    otherwise name whichever of them the run reached first. Their passes are named by
    number (``after:check_delivery#3``) or by their scoped alias.
    """
    entries = list(entries)
    numbered = number_points(name for name, _aliases in entries)
    found: dict[str, str] = {}
    for point, (name, aliases) in zip(numbered, entries, strict=True):
        in_root = root is None or _in_root(name, aliases, root)
        for alias in aliases:
            if in_root or not _STEP_ALIAS.fullmatch(alias):
                found.setdefault(alias, point)
    return found


_STEP_ALIAS = re.compile(r"(?:before:|after:)?step:[0-9]+")
_PASS_SUFFIX = re.compile(r"#[0-9]+$")


def _in_root(name: str, aliases: tuple[str, ...], root: str) -> bool:
    """Whether this pass's scoped alias (``name@<root>/<task id>[#n]``) is in the root
    instance's first generation."""
    prefix = f"{name}@{root}/"
    for alias in aliases:
        if alias.startswith(prefix):
            return _PASS_SUFFIX.sub("", alias[len(prefix):]).isdigit()
    return False


def select_points(patterns: Iterable[str], points: Sequence[str],
                  aliases: Mapping[str, str]) -> list[str]:
    """The clean run's numbered points that ``patterns`` name, in the order it reached them.

    A pattern is a point (``after:fetch#2``), an alias (``step:87``), a glob over both
    (``after:*``, ``before:step:9?``) or a step range (``step:80-90``, ``before:step:1-5``).
    A pattern that matches nothing the clean run reached is a UsageError; for a plain name,
    it names the nearest points there are (a typo, or a pass the run never made:
    ``after:step:2#2``).
    """
    order = {p: i for i, p in enumerate(points)}
    chosen: dict[str, None] = {}
    for pattern in patterns:
        found = _expand(pattern, points, aliases)
        if found is None:
            raise UsageError(f"--point {pattern!r} is none of the {len(points)} points the "
                             f"clean run reached; nearest: "
                             f"{', '.join(_nearest(pattern, points, aliases))} "
                             f"(see them all with --json)")
        if not found:
            raise UsageError(f"--point {pattern!r} matches none of the {len(points)} points "
                             f"the clean run reached (see them with --json)")
        chosen.update(dict.fromkeys(found))
    return sorted(chosen, key=lambda p: order.get(p, len(order)))


def _nearest(pattern: str, points: Sequence[str], aliases: Mapping[str, str]) -> list[str]:
    """A few real points (or step aliases) that look most like ``pattern``."""
    names = [*points, *(a for a in aliases if "@" not in a)]
    close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.4)
    if not close:  # nothing alike: the points with the same name, else the first few
        base = base_point(pattern)
        close = [p for p in points if base_point(p) == base][:3] or list(points[:3])
    return close


def sample_points(points: Sequence[str], k: int, seed: int) -> list[str]:
    """``k`` of ``points`` chosen by ``random.Random(seed)``, kept in their order: the same
    seed chooses the same points. All of them when ``k`` is at least their number;
    UsageError when ``k`` is below 1."""
    if k < 1:
        raise UsageError(f"--sample must be at least 1, not {k}")
    if k >= len(points):
        return list(points)
    chosen = random.Random(seed).sample(range(len(points)), k)
    return [points[i] for i in sorted(chosen)]


def _expand(pattern: str, points: Sequence[str], aliases: Mapping[str, str]
            ) -> list[str] | None:
    """The points a pattern names; None for a plain name that is neither point nor alias."""
    if pattern in aliases:
        return [aliases[pattern]]
    if (m := _STEP_RANGE.fullmatch(pattern)) is not None:
        names = (f"{m['prefix']}{n}" for n in range(int(m["lo"]), int(m["hi"]) + 1))
        return [aliases[name] for name in names if name in aliases]
    if any(c in pattern for c in "*?["):
        return [p for p in points if fnmatch.fnmatchcase(p, pattern)] + \
            [p for a, p in aliases.items() if fnmatch.fnmatchcase(a, pattern)]
    return [pattern] if pattern in points else None


def crash_at(point: str) -> str:
    """The ``HISTAUDIT_CRASH_AT`` value that fires exactly once, at this pass."""
    name, n = split_point(point)
    return f"{name}#{n}"


def declared_points(sources: Iterable[str | os.PathLike[str]],
                    activities: Iterable[str] = ()) -> list[str]:
    """Crash points the code declares, found without running it.

    ``crash_point("literal")`` calls (as a name or an attribute), ``before-effect:`` /
    ``after-effect:`` of ``side_effect(ctx, "literal")`` and ``once(ctx, "literal", …)``,
    and ``before:``/``after:`` of every activity in ``activities``.
    """
    points: list[str] = []
    for activity in activities:
        points += [f"before:{activity}", f"after:{activity}"]
    for source in sources:
        try:
            tree = ast.parse(Path(source).read_text(encoding="utf-8"), filename=str(source))
        except (OSError, SyntaxError, ValueError):
            continue
        found: list[tuple[int, int, list[str]]] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None)
            if name == "crash_point" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, node.col_offset, [arg.value]))
            elif name in _EFFECT_CALLS and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, node.col_offset,
                                  [f"before-effect:{arg.value}", f"after-effect:{arg.value}"]))
        for _line, _col, names in sorted(found):
            points += names
    return list(dict.fromkeys(points))
