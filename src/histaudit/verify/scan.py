"""The loop that verifies one chain: each row hashed and parsed once, and checked with a
handful of comparisons unless something about it is off.

:meth:`ChainScan.run` is what :func:`~histaudit.verify.verifier.verify_chain` runs in place
of :func:`~histaudit.verify.check.run_checks`, with the same findings. For each row it
hashes the body and ``orjson.loads`` it once, then tests that the row is the next link of
a well-formed chain of this instance:

* the body hashes to the ``hash`` column (as text, or its bytes: SQLite's raw rows carry
  TEXT as bytes, see ``Statements.entry_rows_of``), is a ten-name object (names below),
  ``v`` is the integer 1 and ``type`` is ``"entry"``, ``data`` an object;
* ``seq`` and ``leaf`` are integers equal to the ``seq`` and ``leaf`` columns;
* ``instance`` equals the (non-empty) instance verified, ``ts`` matches the format;
* ``kind`` and ``kid`` are in a cache of values that passed ``parse_entry``'s rules, with
  what they need: the behaviour event a kind makes, whether a key ever has findings;
* last, the chain's own rule, :meth:`ChainTip.advance
  <histaudit.verify.integrity.ChainTip.advance>` of the integrity check's tip: ``seq``
  one past the newest entry, ``prev`` its hash, ``leaf`` after the previous row's. It
  moves the tip when it holds, so the tip is one object both loops move, never a copy.

Such a row is one ``parse_entry`` accepts with exactly these fields, on which
``IntegrityCheck.observe`` would report nothing and move the tip to it, so the other
checks get its fields (:class:`~histaudit.verify.check.ValidEntryCheck`) and no ``Entry``
is built. Any other row — malformed, tampered, out of order — takes the slow path:
``parse_entry`` and every check's ``observe``, exactly the loop of ``run_checks``.
tests/unit/verify/test_scan.py compares both loops on tables of malformed bodies and on
random chains.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from histaudit.errors import FormatError
from histaudit.ledger import records
from histaudit.ledger.canonical import is_canonical
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.records import StoredEntry, parse_entry

from . import behaviour_events as ev
from .behaviour import BehaviourCheck
from .check import ChainCheck, ValidEntryCheck
from .integrity import HeadCheck, IntegrityCheck
from .signatures import KeyCheck, never_findings

_CACHED = 256
"""Distinct kinds (and key ids) remembered; past that each new one is worked out again."""
_NO_INSTANCE = object()
"""Stands for an instance id no body can equal: every row then takes the slow path."""
_ONE = 1
"""``v is _ONE`` is cheaper than ``v == 1 and type(v) is int``; should orjson not hand
back CPython's cached 1, rows merely take the slow path."""


class _Timestamps:
    """``ts`` checked against the entry format with a regex once per second of entries:
    the scan's inline test passes a ``str`` of 27 characters with the same
    ``YYYY-MM-DDTHH:MM:SS.`` as the last one that passed, six decimal digits
    (``str.isdecimal`` is the regex's ``\\d``: Unicode category Nd) and ``Z``; any other
    comes to :meth:`learn`."""

    def __init__(self) -> None:
        self.prefix = "\x00" * 28  # longer than any match: nothing starts with it

    def learn(self, ts: Any) -> bool:
        """Whether ``ts`` matches the format; if it does, its second is the new prefix."""
        if records._TS.fullmatch(ts) is None:  # TypeError for a non-str: the slow path
            return False
        self.prefix = ts[:20]
        return True


def _valid_kid(kid: object) -> bool:
    return isinstance(kid, str) and len(kid) == 16 and not kid.strip("0123456789abcdef")


class ChainScan:
    """Feeds one instance's rows to its checks, ``run_checks``-equivalent but cheaper."""

    def __init__(self, instance: str, trust: TrustStore, *, integrity: IntegrityCheck,
                 keys: KeyCheck, head: HeadCheck, behaviour: BehaviourCheck,
                 checks: Sequence[ChainCheck]) -> None:
        """``checks``: every check of the chain, in report order, including the four named
        ones; the others must be :class:`ValidEntryCheck`."""
        self.instance, self.trust = instance, trust
        self.integrity, self.keys, self.head, self.behaviour = integrity, keys, head, behaviour
        self.checks = list(checks)
        named = {id(integrity), id(keys), id(head), id(behaviour)}
        order = [c for c in self.checks if id(c) not in named or c is behaviour]
        split = order.index(behaviour)
        self._before: list[ValidEntryCheck] = order[:split]  # type: ignore[assignment]
        self._after: list[ValidEntryCheck] = order[split + 1:]  # type: ignore[assignment]
        self._routes: dict[Any, int] = {}
        self._kids: dict[Any, bool] = {}

    def _learn(self, kind: Any, kid: Any) -> tuple[int | None, bool | None]:
        """(route, key needs checking) for a kind and kid not cached; (None, None) when
        one of them breaks ``parse_entry``'s rules."""
        route = self._routes.get(kind)
        if route is None:
            if kind.__class__ is not str or not kind:
                return None, None
            route = ev.route_of(kind)
            if len(self._routes) < _CACHED:
                self._routes[kind] = route
        checked = self._kids.get(kid)
        if checked is None:
            if not _valid_kid(kid):
                return None, None
            checked = not never_findings(kid, self.trust)
            if len(self._kids) < _CACHED:
                self._kids[kid] = checked
        return route, checked

    def _slow(self, row: StoredEntry) -> None:
        parsed: Any
        try:
            parsed = parse_entry(row.body)
        except FormatError as exc:
            parsed = exc
        for check in self.checks:
            check.observe(row, parsed)

    def run(self, chunks: Iterable[Iterable[Sequence[Any]]],
            as_entry: Callable[[Any], StoredEntry] | None = None) -> int:
        """Feed every row of every chunk; return how many there were.

        A row is a :class:`StoredEntry`, or — with ``as_entry``, which makes one of such a
        row — a tuple in its column order as a driver returns it, its types unchecked
        (``Snapshot.entry_chunks``). The fast path tests the types it relies on and
        never reads the row's instance (the body's is compared with the instance
        verified); a row that fails them goes to the checks as ``as_entry`` makes it,
        like every row a check is handed."""
        integrity, on = self.integrity, self.behaviour.on
        instance: Any = self.instance
        if instance.__class__ is not str or not instance:
            instance = _NO_INSTANCE
        inline_canonical = integrity.canonical and not any(
            getattr(c, "checks_canonical", False) for c in self._before)
        before = tuple(c.observe_valid for c in self._before)
        after = tuple(c.observe_valid for c in self._after)
        key_valid, routes, kids = self.keys.observe_valid, self._routes, self._kids
        sha, loads, one, stamps = hashlib.sha256, orjson.loads, _ONE, _Timestamps()
        advance = integrity.tip.advance
        count = slow = 0
        entry: Any = None
        row: Any  # a StoredEntry, or a driver's tuple when as_entry is given
        for row in itertools.chain.from_iterable(chunks):
            count += 1
            leaf_c, _, seq_c, hash_c, body, _sig = row
            route = checked = None
            try:
                digest = sha(body).hexdigest()
                doc = loads(body)
                seq, leaf, prev, data = doc["seq"], doc["leaf"], doc["prev"], doc["data"]
                v, kind, kid, ts = doc["v"], doc["kind"], doc["kid"], doc["ts"]
                ok = ((hash_c == digest.encode() if hash_c.__class__ is bytes
                       else digest == hash_c)
                      and body.__class__ is bytes and seq.__class__ is int and seq == seq_c
                      and seq_c.__class__ is int and leaf.__class__ is int and leaf == leaf_c
                      and leaf_c.__class__ is int
                      and doc["instance"] == instance and len(doc) == 10 and v is one
                      and doc["type"] == "entry" and data.__class__ is dict
                      and ((ts.__class__ is str and len(ts) == 27
                            and ts.startswith(stamps.prefix) and ts[20:26].isdecimal()
                            and ts[26] == "Z") or stamps.learn(ts)))
                if ok:
                    route, checked = routes.get(kind), kids.get(kid)
            except (orjson.JSONDecodeError, KeyError, TypeError):
                ok = False
            if ok and (route is None or checked is None):
                route, checked = self._learn(kind, kid)
                ok = route is not None
            # the chain's own rule, last: it moves the tip when the row is the next link
            if not (ok and advance(seq, prev, leaf, digest)):
                self._slow(row if as_entry is None else as_entry(row))
                slow += 1
                continue
            if inline_canonical and not is_canonical(body, doc):
                integrity.not_canonical(len(integrity.findings), seq)
            if checked or before or after:
                entry = row if as_entry is None else as_entry(row)
                if checked:
                    key_valid(entry, instance, seq, kind, kid, ts, data)
                for observe in before:
                    observe(entry, instance, seq, kind, kid, ts, data)
            if route:
                on[route](seq, kind, kid, data)
            if after:
                for observe in after:
                    observe(entry, instance, seq, kind, kid, ts, data)
        self.head.rows += count - slow
        return count
