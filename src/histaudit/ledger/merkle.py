"""The ledger-wide Merkle tree (RFC 9162 §2.1 hashing, proofs and their verification).

Every entry is leaf number ``leaf`` of one tree over the whole ledger; its leaf input is
the entry's exact stored bytes. A signed checkpoint commits to the tree's size and root,
so anyone who kept one can later demand a consistency proof: a database restored from an
older copy, a deleted instance or a fork cannot produce one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Iterable[bytes]) -> tuple[int, bytes]:
    """(size, root) of the tree over ``leaf_hashes``, streaming in O(log n) memory."""
    stack: list[tuple[int, bytes]] = []  # (height, hash) of complete subtrees, left to right
    size = 0
    for h in leaf_hashes:
        size += 1
        height, node = 0, h
        while stack and stack[-1][0] == height:
            node = node_hash(stack.pop()[1], node)
            height += 1
        stack.append((height, node))
    if not stack:
        return 0, EMPTY_ROOT
    node = stack.pop()[1]
    while stack:  # fold the incomplete right edge, smallest subtree first
        node = node_hash(stack.pop()[1], node)
    return size, node


class Tree:
    """A whole tree in memory (32 bytes per node), for proofs in O(log n) each."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(leaf_hashes)]
        while len(self.levels[-1]) > 1:
            below = self.levels[-1]
            self.levels.append([node_hash(below[i], below[i + 1])
                                for i in range(0, len(below) - 1, 2)])

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        return EMPTY_ROOT if size == 0 else self._mth(0, size)

    def _mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n & (n - 1) == 0:  # a complete subtree, aligned by construction: stored
            height = n.bit_length() - 1
            return self.levels[height][lo >> height]
        k = _split(n)
        return node_hash(self._mth(lo, lo + k), self._mth(lo + k, hi))

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 PATH(index, D[0:size])."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ValueError(f"leaf {index} is not in a tree of size {size}")
        proof: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                proof.append(self._mth(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._mth(lo, lo + k))
                lo += k
        return proof[::-1]

    def consistency_proof(self, old_size: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 PROOF(old_size, D[0:size])."""
        size = self.size if size is None else size
        if not 0 <= old_size <= size <= self.size:
            raise ValueError(f"no consistency proof from size {old_size} to {size}")
        if old_size in (0, size):
            return []
        proof: list[bytes] = []
        lo, hi, m, whole = 0, size, old_size, True
        while m != hi - lo:
            k = _split(hi - lo)
            if m <= k:
                proof.append(self._mth(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._mth(lo, lo + k))
                lo, m, whole = lo + k, m - k, False
        if not whole:
            proof.append(self._mth(lo, hi))
        return proof[::-1]


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes],
                     root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: is ``leaf`` at ``index`` in the tree of ``size`` with ``root``?"""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(old_size: int, size: int, old_root: bytes, root: bytes,
                       proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2: is the tree (size, root) an append-only extension of the old one?"""
    if not 0 <= old_size <= size:
        return False
    if old_size == size:
        return not proof and old_root == root
    if old_size == 0:
        return not proof
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == root
