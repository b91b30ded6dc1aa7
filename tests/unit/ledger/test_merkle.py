"""histaudit.merkle against a naive transcription of RFC 9162 §2.1 written here.

The reference below follows the RFC's recursive definitions literally (MTH, PATH, PROOF
and SUBPROOF), with no shared code: roots, inclusion proofs and consistency proofs of the
module must equal it for every tree size and index tried, every genuine proof must verify,
and a proof with anything wrong in it (leaf, index, root, a hash, its length) must not.
Known answers at the end are derived by hand from the definitions, plus the roots of the
RFC 6962 reference test data and the worked example of docs/bundle.md §15.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.ledger import merkle

# --- the naive reference (RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1) ---------------------------


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than n (n >= 2)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    if not d:
        return sha(b"")
    if len(d) == 1:
        return sha(b"\x00" + d[0])
    k = split_point(len(d))
    return sha(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = split_point(len(d))
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], whole: bool) -> list[bytes]:
    if m == len(d):
        return [] if whole else [mth(d)]
    k = split_point(len(d))
    if m <= k:
        return [*subproof(m, d[:k], whole), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


def proof(m: int, d: list[bytes]) -> list[bytes]:
    return subproof(m, d, True)


def leaves(n: int, tag: bytes = b"") -> list[bytes]:
    """n distinct leaf inputs, of varied lengths (an entry body is any bytes)."""
    return [tag + b"leaf-%d-" % i + bytes(i % 7) for i in range(n)]


def flip(h: bytes, bit: int = 0) -> bytes:
    return bytes([h[0] ^ (1 << bit)]) + h[1:]


def tree_of(d: list[bytes]) -> merkle.Tree:
    return merkle.Tree([merkle.leaf_hash(x) for x in d])


# --- roots ------------------------------------------------------------------------------

N_ROOTS = 130  # crosses several powers of two (64, 128) with ragged right edges


def test_roots_of_every_size_match_the_rfc_definition() -> None:
    d = leaves(N_ROOTS)
    whole = tree_of(d)
    for n in range(N_ROOTS + 1):
        want = mth(d[:n])
        assert merkle.root_of(merkle.leaf_hash(x) for x in d[:n]) == (n, want), n
        assert tree_of(d[:n]).root() == want, n
        assert whole.root(n) == want, n  # a prefix of a bigger tree, from its stored levels
        assert tree_of(d[:n]).size == n


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=70))
def test_roots_of_arbitrary_leaves(d: list[bytes]) -> None:
    want = mth(d)
    assert merkle.root_of(merkle.leaf_hash(x) for x in d) == (len(d), want)
    assert tree_of(d).root() == want


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    a, b = sha(b"x"), sha(b"y")
    assert merkle.leaf_hash(b"x") == sha(b"\x00x")
    assert merkle.node_hash(a, b) == sha(b"\x01" + a + b)
    # A 64-byte leaf equal to two child hashes does not hash like the node over them.
    assert merkle.leaf_hash(a + b) != merkle.node_hash(a, b)


# --- inclusion proofs -------------------------------------------------------------------

N_INCL = 40


def test_inclusion_proofs_for_every_index_and_size() -> None:
    d = leaves(N_INCL)
    whole = tree_of(d)
    for n in range(1, N_INCL + 1):
        root, small = mth(d[:n]), tree_of(d[:n])
        for m in range(n):
            p = whole.inclusion_proof(m, n)
            assert p == path(m, d[:n]) == small.inclusion_proof(m), (m, n)
            lh = merkle.leaf_hash(d[m])
            assert merkle.verify_inclusion(m, n, lh, p, root), (m, n)
            # the wrong leaf, at the same index
            other = merkle.leaf_hash(d[(m + 1) % n] if n > 1 else b"not a leaf")
            assert not merkle.verify_inclusion(m, n, other, p, root)
            # the right leaf at any other index (leaves are distinct)
            for wrong in range(n):
                if wrong != m:
                    assert not merkle.verify_inclusion(wrong, n, lh, p, root), (m, wrong, n)
            # out-of-range indexes
            assert not merkle.verify_inclusion(n, n, lh, p, root)
            assert not merkle.verify_inclusion(-1, n, lh, p, root)
            # the wrong root
            assert not merkle.verify_inclusion(m, n, lh, p, flip(root))
            assert not merkle.verify_inclusion(m, n, lh, p, mth(d[:n - 1]) if n > 1
                                               else sha(b""))
            _assert_tampered_inclusion_fails(m, n, lh, p, root)


def _assert_tampered_inclusion_fails(m: int, n: int, lh: bytes, p: list[bytes],
                                     root: bytes) -> None:
    for i in range(len(p)):
        bad = list(p)
        bad[i] = flip(bad[i], i % 8)
        assert not merkle.verify_inclusion(m, n, lh, bad, root), (m, n, i)
    if p:
        assert not merkle.verify_inclusion(m, n, lh, p[:-1], root)  # too short
        assert not merkle.verify_inclusion(m, n, lh, p[1:], root)
        assert not merkle.verify_inclusion(m, n, lh, p[::-1], root) or len(set(p)) == 1
    assert not merkle.verify_inclusion(m, n, lh, [*p, root], root)  # too long
    assert not merkle.verify_inclusion(m, n, lh, [*p, sha(b"extra")], root)


def test_inclusion_in_a_tree_of_one_is_the_leaf_itself() -> None:
    lh = merkle.leaf_hash(b"only")
    assert tree_of([b"only"]).inclusion_proof(0) == []
    assert merkle.verify_inclusion(0, 1, lh, [], lh)
    assert not merkle.verify_inclusion(0, 1, lh, [], flip(lh))
    assert not merkle.verify_inclusion(0, 0, lh, [], lh)  # nothing is in the empty tree


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=24), min_size=1, max_size=300, unique=True), st.data())
def test_inclusion_property(d: list[bytes], data: st.DataObject) -> None:
    n = data.draw(st.integers(1, len(d)), label="size")
    m = data.draw(st.integers(0, n - 1), label="index")
    t = tree_of(d)
    p = t.inclusion_proof(m, n)
    root = mth(d[:n])
    assert p == path(m, d[:n])
    lh = merkle.leaf_hash(d[m])
    assert merkle.verify_inclusion(m, n, lh, p, root)
    if n > 1:
        wrong = data.draw(st.integers(0, n - 1).filter(lambda i: i != m), label="wrong")
        assert not merkle.verify_inclusion(wrong, n, lh, p, root)
        assert not merkle.verify_inclusion(m, n, merkle.leaf_hash(d[wrong]), p, root)
    _assert_tampered_inclusion_fails(m, n, lh, p, root)


def test_inclusion_proof_refuses_bad_ranges() -> None:
    t = tree_of(leaves(5))
    for index, size in ((5, 5), (-1, 5), (0, 0), (0, 6), (3, 3)):
        with pytest.raises(ValueError, match="is not in a tree of size"):
            t.inclusion_proof(index, size)


# --- consistency proofs -----------------------------------------------------------------

N_CONS = 40


def test_consistency_proofs_for_every_pair_of_sizes() -> None:
    d = leaves(N_CONS)
    whole = tree_of(d)
    for n in range(1, N_CONS + 1):
        new_root = mth(d[:n])
        for m in range(1, n + 1):
            old_root = mth(d[:m])
            p = whole.consistency_proof(m, n)
            assert p == (proof(m, d[:n]) if m < n else []), (m, n)
            assert tree_of(d[:n]).consistency_proof(m) == p
            assert merkle.verify_consistency(m, n, old_root, new_root, p), (m, n)
            _assert_tampered_consistency_fails(m, n, old_root, new_root, p)


def _assert_tampered_consistency_fails(m: int, n: int, old_root: bytes, new_root: bytes,
                                       p: list[bytes]) -> None:
    v = merkle.verify_consistency
    assert not v(m, n, flip(old_root), new_root, p), (m, n)
    assert not v(m, n, old_root, flip(new_root), p), (m, n)
    for i in range(len(p)):
        bad = list(p)
        bad[i] = flip(bad[i], i % 8)
        assert not v(m, n, old_root, new_root, bad), (m, n, i)
    if p:
        assert not v(m, n, old_root, new_root, p[:-1])
        assert not v(m, n, old_root, new_root, p[1:])
    assert not v(m, n, old_root, new_root, [*p, sha(b"extra")])
    assert not v(n, m, new_root, old_root, p) or m == n  # sizes the wrong way round


def test_a_rewritten_prefix_is_not_consistent() -> None:
    """A fork: the same sizes, one leaf below the old size changed."""
    d = leaves(33)
    for m in (1, 2, 5, 8, 16, 17, 32):
        for changed in {0, m // 2, m - 1}:
            forked = list(d)
            forked[changed] = b"rewritten"
            f = tree_of(forked)
            for n in (m, m + 1, 33):
                assert not merkle.verify_consistency(m, n, mth(d[:m]), f.root(n),
                                                     f.consistency_proof(m, n)), (m, n)


def test_consistency_edge_cases() -> None:
    d = leaves(9)
    t = tree_of(d)
    # From the empty tree: nothing to prove; a non-empty proof is refused.
    assert t.consistency_proof(0, 9) == []
    assert merkle.verify_consistency(0, 9, sha(b""), t.root(), [])
    assert not merkle.verify_consistency(0, 9, sha(b""), t.root(), [t.root()])
    # Same size: an empty proof and equal roots.
    assert t.consistency_proof(9, 9) == []
    assert merkle.verify_consistency(9, 9, t.root(), t.root(), [])
    assert not merkle.verify_consistency(9, 9, t.root(), t.root(8), [])
    assert not merkle.verify_consistency(9, 9, t.root(), t.root(), [t.root()])
    # Shrinking is never consistent; an empty proof between different sizes neither.
    assert not merkle.verify_consistency(9, 8, t.root(), t.root(8), [])
    assert not merkle.verify_consistency(3, 9, t.root(3), t.root(), [])
    assert not merkle.verify_consistency(4, 9, t.root(4), t.root(), [])
    for old, new in ((10, 9), (-1, 9), (3, 10)):
        with pytest.raises(ValueError, match="no consistency proof from size"):
            t.consistency_proof(old, new)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=24), min_size=1, max_size=300, unique=True), st.data())
def test_consistency_property(d: list[bytes], data: st.DataObject) -> None:
    n = data.draw(st.integers(1, len(d)), label="size")
    m = data.draw(st.integers(1, n), label="old size")
    t = tree_of(d)
    p = t.consistency_proof(m, n)
    assert p == (proof(m, d[:n]) if m < n else [])
    assert merkle.verify_consistency(m, n, mth(d[:m]), mth(d[:n]), p)
    _assert_tampered_consistency_fails(m, n, mth(d[:m]), mth(d[:n]), p)


# --- known answers, by hand from the definitions ----------------------------------------


def test_known_answers_derived_by_hand() -> None:
    d0, d1, d2 = b"first entry", b"second entry", b"third entry"
    h0, h1, h2 = sha(b"\x00" + d0), sha(b"\x00" + d1), sha(b"\x00" + d2)
    empty = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    assert empty == merkle.EMPTY_ROOT
    assert merkle.root_of([]) == (0, empty)
    assert merkle.root_of([h0]) == (1, h0)
    two = sha(b"\x01" + h0 + h1)
    assert merkle.root_of([h0, h1]) == (2, two)
    # Three leaves: k = 2, so the left subtree is complete and leaf 2 hangs on the right.
    three = sha(b"\x01" + two + h2)
    assert merkle.root_of([h0, h1, h2]) == (3, three)
    t = merkle.Tree([h0, h1, h2])
    assert t.root() == three
    assert t.inclusion_proof(0) == [h1, h2]
    assert t.inclusion_proof(1) == [h0, h2]
    assert t.inclusion_proof(2) == [two]
    assert t.consistency_proof(1) == [h1, h2]   # 1 is a power of two: old root omitted
    assert t.consistency_proof(2) == [h2]
    assert merkle.verify_inclusion(2, 3, h2, [two], three)
    assert merkle.verify_consistency(2, 3, two, three, [h2])
    # Four leaves: a complete tree of two complete pairs.
    d3 = b"fourth"
    h3 = sha(b"\x00" + d3)
    four = sha(b"\x01" + two + sha(b"\x01" + h2 + h3))
    assert merkle.root_of([h0, h1, h2, h3])[1] == four
    # Five: the four above, then leaf 4 alone on the right.
    h4 = sha(b"\x00" + b"fifth")
    assert merkle.root_of([h0, h1, h2, h3, h4])[1] == sha(b"\x01" + four + h4)
    assert merkle.Tree([h0, h1, h2, h3, h4]).consistency_proof(3) == [
        h2, h3, two, h4]


def test_docs_bundle_md_example() -> None:
    """The tree of leaves a, b, c in docs/bundle.md §15."""
    t = tree_of([b"a", b"b", b"c"])
    ha, hb, hc = (merkle.leaf_hash(x).hex() for x in (b"a", b"b", b"c"))
    assert ha == "022a6979e6dab7aa5ae4c3e5e45f7e977112a7e63593820dbec1ec738a24f93c"
    assert hb == "57eb35615d47f34ec714cacdf5fd74608a5e8e102724e80b24b287c0c27b6a31"
    assert hc == "597fcb31282d34654c200d3418fca5705c648ebf326ec73d8ddef11841f876d8"
    assert t.root(2).hex() == "b137985ff484fb600db93107c77b0365c80d78f5b429ded0fd97361d077999eb"
    assert t.root().hex() == "36642e73c2540ab121e3a6bf9545b0a24982cd830eb13d3cd19de3ce6c021ec1"
    assert [p.hex() for p in t.consistency_proof(1)] == [hb, hc]


# Roots of the RFC 6962 reference test data (certificate-transparency test vectors):
# the tree of the first n of these eight leaf inputs.
RFC6962_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                  "606162636465666768696a6b6c6d6e6f"]
RFC6962_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


@pytest.mark.parametrize("n", range(len(RFC6962_ROOTS)))
def test_rfc6962_reference_roots(n: int) -> None:
    d = [bytes.fromhex(x) for x in RFC6962_LEAVES[:n]]
    assert merkle.root_of(merkle.leaf_hash(x) for x in d)[1].hex() == RFC6962_ROOTS[n]
    assert mth(d).hex() == RFC6962_ROOTS[n]  # the reference above agrees too
