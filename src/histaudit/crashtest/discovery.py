"""Crash points: the names of the passes a run makes, and the ones the code declares.

A point reached more than once is numbered: ``after:fetch_source#2`` is its second pass
(:func:`number_points`). :func:`declared_points` reads the app's source, without running
it, for the points it should reach, so a clean run can say which it never did.
"""

from __future__ import annotations

import ast
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

__all__ = ["base_point", "crash_at", "declared_points", "number_points", "split_point"]

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
