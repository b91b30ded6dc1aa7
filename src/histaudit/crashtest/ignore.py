"""Ignored output fields: the RFC 9535 JSONPaths (``--ignore``) a comparison leaves out.

A workflow's output may hold fields the user knows differ from run to run (a timestamp,
a generated id); :func:`without_paths` removes the nodes such paths select, from the
clean run's output and a crashed run's alike, before the two are compared. Paths are
parsed by jsonpath-rfc9535, which implements RFC 9535 and nothing else, imported only when
there is a path to parse, so a matrix without ``--ignore`` does not load it. Its import
name is its own: python-jsonpath, used before, shared the top-level ``jsonpath`` with
jsonpath-python, which dapr-agents brings in (through mistralai) and which overwrote it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Set
from typing import TYPE_CHECKING, Any

from histaudit.errors import UsageError

if TYPE_CHECKING:
    from jsonpath_rfc9535 import JSONPathEnvironment, JSONPathQuery

__all__ = ["check_paths", "without_paths"]

_Location = tuple[str | int, ...]


@functools.cache
def _environment() -> JSONPathEnvironment:
    from jsonpath_rfc9535 import JSONPathEnvironment

    return JSONPathEnvironment()


@functools.lru_cache(maxsize=256)
def _compile(path: str) -> JSONPathQuery:
    from jsonpath_rfc9535 import JSONPathError

    try:
        return _environment().compile(path)
    except JSONPathError as exc:
        reason = exc.args[0] if exc.args else type(exc).__name__
        raise UsageError(f"--ignore {path!r} is not an RFC 9535 JSONPath: {reason}") from None


def check_paths(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` as a tuple, each parsed once; UsageError (one line) for one that is not
    JSONPath, or for one string (its characters would each be a path: ``$`` is all)."""
    if isinstance(paths, str):
        raise UsageError(f"ignore is a sequence of JSONPaths, not the string {paths!r}")
    paths = tuple(paths)
    for path in paths:
        _compile(path)
    return paths


def without_paths(value: Any, paths: Iterable[str]) -> Any:
    """A copy of the JSON ``value`` without the nodes any of ``paths`` selects; None when
    a path selects the root (``$``). UsageError for a path that is not JSONPath."""
    drop: set[_Location] = set()
    for path in paths:
        drop.update(node.location for node in _compile(path).finditer(value))
    if not drop:
        return value
    if () in drop:
        return None
    return _prune(value, (), drop)


def _prune(value: Any, where: _Location, drop: Set[_Location]) -> Any:
    if isinstance(value, dict):
        return {k: _prune(v, (*where, k), drop) for k, v in value.items()
                if (*where, k) not in drop}
    if isinstance(value, list):
        return [_prune(v, (*where, i), drop) for i, v in enumerate(value)
                if (*where, i) not in drop]
    return value
