"""Merkle trees of the transparency log (RFC 9162): known answers from RFC 6962's test vectors
(``tests/vectors/rfc6962_merkle_tree.json``), proofs cross-checked against a naive recursive
transcription of the RFC over many tree sizes (hypothesis), and every way of tampering with a
proof refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbench.crypto import tlog
from sealbench.crypto.errors import ConsistencyProofError, InclusionProofError, TreeError

VECTORS = json.loads(
    (Path(__file__).parents[2] / "vectors" / "rfc6962_merkle_tree.json").read_text()
)
LEAVES = [tlog.leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaves_hex"]]
ROOTS = [bytes.fromhex(x) for x in VECTORS["roots_hex"]]


# -- a naive transcription of RFC 9162 2.1, the reference --------------------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return tlog.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = _k(len(leaves))
    return tlog.node_hash(mth(leaves[:k]), mth(leaves[k:]))


def path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = _k(len(leaves))
    if m < k:
        return [*path(m, leaves[:k]), mth(leaves[k:])]
    return [*path(m - k, leaves[k:]), mth(leaves[:k])]


def subproof(m: int, leaves: Sequence[bytes], whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = _k(n)
    if m <= k:
        return [*subproof(m, leaves[:k], whole), mth(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), mth(leaves[:k])]


class MemoryTree:
    """A SubtreeReader that stores exactly what CompactRange reports while appending."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.edge = tlog.CompactRange()
        self.reads: list[int] = []
        for leaf in leaves:
            for key, value in self.edge.append(leaf):
                assert key not in self.nodes
                self.nodes[key] = value

    def subtree_hashes(self, keys: Sequence[tuple[int, int]]) -> list[bytes]:
        self.reads.append(len(keys))
        return [self.nodes[key] for key in keys]


def leaves_of(n: int) -> list[bytes]:
    return [tlog.leaf_hash(f"leaf {i}".encode()) for i in range(n)]


# -- known answers ------------------------------------------------------------------------------


def test_known_roots() -> None:
    for n in range(1, 9):
        assert tlog.root_from_leaf_hashes(LEAVES[:n]) == ROOTS[n - 1]
        assert tlog.tree_root(n, MemoryTree(LEAVES[:n])) == ROOTS[n - 1]
    assert tlog.root_from_leaf_hashes([]) == tlog.EMPTY_ROOT


@pytest.mark.parametrize("case", VECTORS["inclusion"], ids=lambda c: f"{c['index']}-of-{c['size']}")
def test_known_inclusion_proofs(case: dict[str, object]) -> None:
    index, size = int(case["index"]), int(case["size"])  # type: ignore[call-overload]
    expected = [bytes.fromhex(h) for h in case["proof_hex"]]  # type: ignore[attr-defined]
    assert list(tlog.inclusion_proof(index, size, MemoryTree(LEAVES[:size]))) == expected
    tlog.verify_inclusion(LEAVES[index], index, size, expected, ROOTS[size - 1])


@pytest.mark.parametrize(
    "case", VECTORS["consistency"], ids=lambda c: f"{c['first']}-{c['second']}"
)
def test_known_consistency_proofs(case: dict[str, object]) -> None:
    first, second = int(case["first"]), int(case["second"])  # type: ignore[call-overload]
    expected = [bytes.fromhex(h) for h in case["proof_hex"]]  # type: ignore[attr-defined]
    assert list(tlog.consistency_proof(first, second, MemoryTree(LEAVES[:second]))) == expected
    tlog.verify_consistency(first, second, ROOTS[first - 1], ROOTS[second - 1], expected)


# -- tampering, as transparency-dev's corrupt*Proof probes ------------------------------------


def _inclusion_probes(index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes) -> (
    list[tuple[str, int, int, list[bytes], bytes, bytes]]
):
    some = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")
    probes = [
        ("index - 1", index - 1, size, proof, root, leaf),
        ("index + 1", index + 1, size, proof, root, leaf),
        ("index ^ 2", index ^ 2, size, proof, root, leaf),
        ("size * 2", index, size * 2, proof, root, leaf),
        ("size // 2", index, size // 2, proof, root, leaf),
        ("wrong leaf", index, size, proof, root, tlog.leaf_hash(b"wrong")),
        ("empty root", index, size, proof, tlog.EMPTY_ROOT, leaf),
        ("random root", index, size, proof, some, leaf),
        ("trailing root", index, size, [*proof, root], root, leaf),
        ("preceding root", index, size, [root, *proof], root, leaf),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
        probes.append((f"proof[{i}] bit flipped", index, size, flipped, root, leaf))
    if proof:
        probes.append(("removed component", index, size, proof[:-1], root, leaf))
    if len(proof) > 1:
        probes.append(("inserted component", index, size, [proof[0], some, *proof[1:]], root,
                       leaf))
    return probes


@pytest.mark.parametrize("case", VECTORS["inclusion"][1:], ids=lambda c: f"{c['index']}")
def test_tampered_inclusion_proof_rejected(case: dict[str, object]) -> None:
    index, size = int(case["index"]), int(case["size"])  # type: ignore[call-overload]
    proof = [bytes.fromhex(h) for h in case["proof_hex"]]  # type: ignore[attr-defined]
    for name, i, n, p, root, leaf in _inclusion_probes(index, size, proof, ROOTS[size - 1],
                                                        LEAVES[index]):
        with pytest.raises(InclusionProofError):
            tlog.verify_inclusion(leaf, i, n, p, root)
            pytest.fail(f"accepted: {name}")


@pytest.mark.parametrize("case", [c for c in VECTORS["consistency"] if c["proof_hex"]],
                         ids=lambda c: f"{c['first']}-{c['second']}")
def test_tampered_consistency_proof_rejected(case: dict[str, object]) -> None:
    m, n = int(case["first"]), int(case["second"])  # type: ignore[call-overload]
    proof = [bytes.fromhex(h) for h in case["proof_hex"]]  # type: ignore[attr-defined]
    r1, r2 = ROOTS[m - 1], ROOTS[n - 1]
    probes = [
        (m - 1, n, r1, r2, proof), (m + 1, n, r1, r2, proof), (m ^ 2, n, r1, r2, proof),
        (m, n * 2, r1, r2, proof), (m, n // 2, r1, r2, proof),
        (m, n, tlog.leaf_hash(b"wrong"), r2, proof), (m, n, r1, tlog.leaf_hash(b"x"), proof),
        (m, n, r2, r1, proof), (m, n, r1, r2, []),
        (m, n, r1, r2, [*proof, r1]), (m, n, r1, r2, [*proof, r2]),
        (m, n, r1, r2, [r1, *proof]), (m, n, r1, r2, [r2, *proof]),
        (m, n, r1, r2, [proof[0], *proof]), (m, n, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 16]) + flipped[i][1:]
        probes.append((m, n, r1, r2, flipped))
    for first, second, root1, root2, p in probes:
        if (first, second, root1, root2, p) == (m, n, r1, r2, proof):
            continue
        with pytest.raises(ConsistencyProofError):
            tlog.verify_consistency(first, second, root1, root2, p)


def test_rollback_and_same_size_fork_rejected() -> None:
    with pytest.raises(ConsistencyProofError, match="rollback"):
        tlog.verify_consistency(5, 3, ROOTS[4], ROOTS[2], [])
    with pytest.raises(ConsistencyProofError, match="two different roots for the same tree size"):
        tlog.verify_consistency(4, 4, ROOTS[3], ROOTS[4], [])
    tlog.verify_consistency(4, 4, ROOTS[3], ROOTS[3], [])
    tlog.verify_consistency(0, 7, tlog.EMPTY_ROOT, ROOTS[6], [])
    with pytest.raises(ConsistencyProofError):
        tlog.verify_consistency(0, 7, tlog.EMPTY_ROOT, ROOTS[6], [ROOTS[0]])


def test_malformed_hashes_rejected() -> None:
    with pytest.raises(InclusionProofError, match="leaf hash is 5 bytes"):
        tlog.verify_inclusion(b"short", 0, 1, [], ROOTS[0])
    with pytest.raises(InclusionProofError, match="proof hash 0"):
        tlog.verify_inclusion(LEAVES[0], 0, 2, [b"x"], ROOTS[1])
    with pytest.raises(ConsistencyProofError, match="longer than any valid proof"):
        tlog.verify_consistency(3, 8, ROOTS[2], ROOTS[7], [ROOTS[0]] * 200)


# -- against the naive reference, over many sizes ---------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 600), st.data())
def test_proofs_match_the_rfc_over_any_size(n: int, data: st.DataObject) -> None:
    leaves = leaves_of(n)
    tree = MemoryTree(leaves)
    root = mth(leaves)
    assert tree.edge.root() == root == tlog.tree_root(n, tree)
    index = data.draw(st.integers(0, n - 1), label="index")
    proof = tlog.inclusion_proof(index, n, tree)
    assert list(proof) == path(index, leaves)
    tlog.verify_inclusion(leaves[index], index, n, proof, root)
    m = data.draw(st.integers(0, n), label="first")
    consistency = tlog.consistency_proof(m, n, tree)
    expected = [] if m in (0, n) else subproof(m, leaves, True)
    assert list(consistency) == expected
    tlog.verify_consistency(m, n, mth(leaves[:m]), root, consistency)
    # every proof is read in one call, and only O(log n) subtree hashes
    assert all(r <= 2 * n.bit_length() + 2 for r in tree.reads)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.data())
def test_altered_leaf_breaks_consistency_from_any_earlier_size(n: int, data: st.DataObject) -> (
    None
):
    """A log that rewrites leaf ``i`` cannot prove that its new tree extends any tree that
    already held leaf ``i``."""
    leaves = leaves_of(n)
    i = data.draw(st.integers(0, n - 1), label="altered leaf")
    m = data.draw(st.integers(i + 1, n), label="earlier size")
    rewritten = list(leaves)
    rewritten[i] = tlog.leaf_hash(b"rewritten")
    forged = tlog.consistency_proof(m, n, MemoryTree(rewritten))
    with pytest.raises(ConsistencyProofError):
        tlog.verify_consistency(m, n, mth(leaves[:m]), mth(rewritten), forged)


def test_compact_range_reports_every_complete_subtree_once() -> None:
    leaves = leaves_of(37)
    tree = MemoryTree(leaves)
    assert len(tree.nodes) == 2 * 37 - 37 .bit_count()
    for (level, index), value in tree.nodes.items():
        start = index << level
        assert value == mth(leaves[start : start + (1 << level)])
    edge = tlog.CompactRange.from_bytes(37, tree.edge.to_bytes())
    assert edge.root() == tree.edge.root()
    assert [key for key, _ in edge.subtrees()] == [(5, 0), (2, 8), (0, 36)]
    copy = edge.copy()
    copy.append(leaves[0])
    assert edge.size == 37 and copy.size == 38


def test_impossible_ranges_and_sizes_refused() -> None:
    with pytest.raises(TreeError, match="not aligned"):
        tlog.range_subtrees(3, 7)
    with pytest.raises(TreeError, match="not in a tree of size 4"):
        tlog.inclusion_proof_ranges(4, 4)
    with pytest.raises(TreeError, match="no consistency proof"):
        tlog.consistency_proof_ranges(5, 4)
    with pytest.raises(TreeError, match="has 2 hashes"):
        tlog.CompactRange(3, [LEAVES[0]])
    with pytest.raises(TreeError, match="outside"):
        tlog.tree_root(tlog.MAX_TREE_SIZE + 1, MemoryTree([]))
