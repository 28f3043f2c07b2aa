"""Merkle trees of a transparency log (RFC 9162, section 2.1): hashing, the compact range a log
keeps while appending, inclusion and consistency proofs (generation and verification).

Hashing (RFC 9162 2.1.1; identical to RFC 6962)::

    leaf hash  = SHA-256(0x00 || leaf data)
    node hash  = SHA-256(0x01 || left child hash || right child hash)
    empty tree = SHA-256("")

A tree of ``n`` leaves splits at ``k``, the largest power of two smaller than ``n``. Every proof
element is the hash of a range of leaves ``[a, b)`` that starts at a multiple of a power of two
at least ``b - a``; such a range is the right-to-left fold of its aligned *complete subtrees*,
one per set bit of ``b - a``. A complete subtree is named ``(level, index)``: the ``2**level``
leaves from ``index * 2**level``. A log that stores every complete subtree's hash when it
completes (:class:`CompactRange` reports them while appending) answers any proof with
``O(log n)`` of them, read through a :class:`SubtreeReader`.

Verification follows RFC 9162 2.1.3.2 and 2.1.4.2 exactly and raises (never returns a bool):
:class:`~sealbench.crypto.errors.InclusionProofError` or
:class:`~sealbench.crypto.errors.ConsistencyProofError`. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from sealbench.crypto.errors import ConsistencyProofError, InclusionProofError, TreeError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_TREE_SIZE",
    "CompactRange",
    "SubtreeReader",
    "consistency_proof",
    "consistency_proof_ranges",
    "inclusion_proof",
    "inclusion_proof_ranges",
    "leaf_hash",
    "node_hash",
    "range_subtrees",
    "root_from_leaf_hashes",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final = 32
#: Sizes beyond this are refused (2**48 leaves: far more than any registry writes).
MAX_TREE_SIZE: Final = 1 << 48
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
#: Proofs longer than this cannot be valid for any tree of at most MAX_TREE_SIZE leaves.
_MAX_PROOF: Final = 2 * 48 + 2

Subtree = tuple[int, int]  # (level, index)


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_size(size: int, what: str = "tree size") -> None:
    if not 0 <= size <= MAX_TREE_SIZE:
        raise TreeError(f"{what} {size} is outside 0..{MAX_TREE_SIZE}")


def range_subtrees(start: int, end: int) -> list[Subtree]:
    """The aligned complete subtrees that make up ``[start, end)``, left to right. The range
    must start at a multiple of a power of two that is at least its length (every range that a
    proof or a tree head needs does)."""
    if not 0 <= start < end:
        raise TreeError(f"empty or negative leaf range [{start}, {end})")
    width = end - start
    if start % (1 << (width - 1).bit_length()) != 0:
        raise TreeError(f"leaf range [{start}, {end}) is not aligned")
    out: list[Subtree] = []
    at = start
    for level in range(width.bit_length() - 1, -1, -1):
        if width >> level & 1:
            out.append((level, at >> level))
            at += 1 << level
    return out


def _fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of consecutive complete subtrees (left to right), folded right to left."""
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


class SubtreeReader(Protocol):
    """Where a log keeps the hashes of its complete subtrees."""

    def subtree_hashes(self, keys: Sequence[Subtree]) -> Sequence[bytes]:
        """The hash of each ``(level, index)`` in ``keys``, in order; raises if one is absent."""
        ...


def _hash_ranges(ranges: Sequence[tuple[int, int]], reader: SubtreeReader) -> tuple[bytes, ...]:
    """The hash of each leaf range, reading every needed subtree in one call."""
    parts = [range_subtrees(a, b) for a, b in ranges]
    keys = sorted({key for part in parts for key in part})
    found = reader.subtree_hashes(keys)
    if len(found) != len(keys):
        raise TreeError(f"asked for {len(keys)} subtree hashes, received {len(found)}")
    table = dict(zip(keys, found, strict=True))
    for key, value in table.items():
        if len(value) != HASH_SIZE:
            raise TreeError(f"subtree {key} has a {len(value)}-byte hash")
    return tuple(_fold([table[key] for key in part]) for part in parts)


def tree_root(size: int, reader: SubtreeReader) -> bytes:
    """The root hash of the first ``size`` leaves."""
    _check_size(size)
    if size == 0:
        return EMPTY_ROOT
    return _hash_ranges([(0, size)], reader)[0]


def inclusion_proof_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form the inclusion proof of leaf ``index`` in a tree of
    ``size`` leaves (RFC 9162 2.1.3.1, PATH), leaf to root."""
    _check_size(size)
    if not 0 <= index < size:
        raise TreeError(f"leaf index {index} is not in a tree of size {size}")
    out: list[tuple[int, int]] = []
    start, end, m = 0, size, index
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start, m = start + k, m - k
    out.reverse()
    return out


def consistency_proof_ranges(first: int, second: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form the consistency proof between tree sizes ``first`` and
    ``second`` (RFC 9162 2.1.4.1, SUBPROOF), empty when ``first`` is 0 or equals ``second``."""
    _check_size(second)
    if not 0 <= first <= second:
        raise TreeError(f"no consistency proof from size {first} to size {second}")
    if first in (0, second):
        return []
    out: list[tuple[int, int]] = []
    start, end, m, whole = 0, second, first, True
    while True:
        if m == end - start:
            if not whole:
                out.append((start, end))
            break
        k = _split(end - start)
        if m <= k:
            out.append((start + k, end))
            end = start + k
        else:
            out.append((start, start + k))
            start, m, whole = start + k, m - k, False
    out.reverse()
    return out


def inclusion_proof(index: int, size: int, reader: SubtreeReader) -> tuple[bytes, ...]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves."""
    return _hash_ranges(inclusion_proof_ranges(index, size), reader)


def consistency_proof(first: int, second: int, reader: SubtreeReader) -> tuple[bytes, ...]:
    """The proof that the tree of ``second`` leaves extends the tree of ``first`` leaves."""
    return _hash_ranges(consistency_proof_ranges(first, second), reader)


def _check_hashes(proof: Sequence[bytes], *named: tuple[str, bytes]) -> None:
    for what, value in named:
        if len(value) != HASH_SIZE:
            raise TreeError(f"{what} is {len(value)} bytes, expected {HASH_SIZE}")
    if len(proof) > _MAX_PROOF:
        raise TreeError(f"a proof of {len(proof)} hashes is longer than any valid proof")
    for i, h in enumerate(proof):
        if len(h) != HASH_SIZE:
            raise TreeError(f"proof hash {i} is {len(h)} bytes, expected {HASH_SIZE}")


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf`` (a leaf hash) is leaf ``index`` of the tree of ``size`` leaves whose
    root is ``root`` (RFC 9162 2.1.3.2). Raises :class:`InclusionProofError`."""
    try:
        _check_size(size)
        _check_hashes(proof, ("leaf hash", leaf), ("root hash", root))
    except TreeError as exc:
        raise InclusionProofError(str(exc)) from exc
    if not 0 <= index < size:
        raise InclusionProofError(f"leaf index {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise InclusionProofError(f"the proof is longer than a path in a tree of size {size}")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn != 0 and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise InclusionProofError(f"the proof is shorter than a path in a tree of size {size}")
    if r != root:
        raise InclusionProofError(
            f"leaf {index} with this proof gives root {r.hex()[:16]}…, not the tree of size "
            f"{size}'s root {root.hex()[:16]}…"
        )


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``second`` leaves (root ``second_root``) extends the tree of
    ``first`` leaves (root ``first_root``) (RFC 9162 2.1.4.2). Raises
    :class:`ConsistencyProofError`."""
    try:
        _check_size(second)
        _check_hashes(proof, ("first root hash", first_root), ("second root hash", second_root))
    except TreeError as exc:
        raise ConsistencyProofError(str(exc)) from exc
    if not 0 <= first <= second:
        raise ConsistencyProofError(
            f"tree size {second} is smaller than the earlier size {first} (rollback)"
        )
    if first == second:
        if proof:
            raise ConsistencyProofError("a proof between equal sizes must be empty")
        if first_root != second_root:
            raise ConsistencyProofError(
                f"two different roots for the same tree size {first}: {first_root.hex()[:16]}… "
                f"and {second_root.hex()[:16]}…"
            )
        return
    if first == 0:
        if proof:
            raise ConsistencyProofError("a proof from the empty tree must be empty")
        return
    if not proof:
        raise ConsistencyProofError(f"an empty proof cannot link size {first} to {second}")
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ConsistencyProofError(
                f"the proof is longer than any proof from size {first} to size {second}"
            )
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn != 0 and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ConsistencyProofError(
            f"the proof is shorter than any proof from size {first} to size {second}"
        )
    if fr != first_root:
        raise ConsistencyProofError(
            f"the tree of size {second} does not contain the tree of size {first} that was "
            f"seen (its first {first} leaves hash to {fr.hex()[:16]}…, not "
            f"{first_root.hex()[:16]}…)"
        )
    if sr != second_root:
        raise ConsistencyProofError(
            f"the proof does not lead to the root of the tree of size {second}"
        )


class CompactRange:
    """The right edge of a tree being appended to: one complete-subtree hash per set bit of the
    size, left to right. Appending a leaf is ``O(log n)`` and reports every complete subtree it
    completes, so a store can keep them for proofs.

    Serialised (:meth:`to_bytes`) as the hashes concatenated left to right; the levels follow
    from the size, which is stored beside it."""

    __slots__ = ("_hashes", "_size")

    def __init__(self, size: int = 0, hashes: Iterable[bytes] = ()) -> None:
        _check_size(size)
        self._size = size
        self._hashes = list(hashes)
        if len(self._hashes) != size.bit_count():
            raise TreeError(
                f"a compact range of size {size} has {size.bit_count()} hashes, "
                f"received {len(self._hashes)}"
            )
        for h in self._hashes:
            if len(h) != HASH_SIZE:
                raise TreeError(f"a compact range hash is {len(h)} bytes, expected {HASH_SIZE}")

    @classmethod
    def from_bytes(cls, size: int, data: bytes) -> CompactRange:
        if len(data) != HASH_SIZE * size.bit_count():
            raise TreeError(
                f"a compact range of size {size} is {HASH_SIZE * size.bit_count()} bytes, "
                f"received {len(data)}"
            )
        return cls(size, (data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)))

    def to_bytes(self) -> bytes:
        return b"".join(self._hashes)

    @property
    def size(self) -> int:
        return self._size

    def subtrees(self) -> list[tuple[Subtree, bytes]]:
        """``((level, index), hash)`` of each complete subtree on the edge, left to right."""
        if self._size == 0:
            return []
        return list(zip(range_subtrees(0, self._size), self._hashes, strict=True))

    def append(self, leaf: bytes) -> list[tuple[Subtree, bytes]]:
        """Add a leaf hash; return the complete subtrees this completes (the leaf itself at
        level 0 first, then each parent it closes, bottom up)."""
        if len(leaf) != HASH_SIZE:
            raise TreeError(f"a leaf hash is {len(leaf)} bytes, expected {HASH_SIZE}")
        if self._size >= MAX_TREE_SIZE:
            raise TreeError(f"the tree is full ({MAX_TREE_SIZE} leaves)")
        index = self._size
        completed: list[tuple[Subtree, bytes]] = [((0, index), leaf)]
        acc, level = leaf, 0
        while index >> level & 1:
            acc = node_hash(self._hashes.pop(), acc)
            level += 1
            completed.append(((level, index >> level), acc))
        self._hashes.append(acc)
        self._size += 1
        return completed

    def root(self) -> bytes:
        return EMPTY_ROOT if self._size == 0 else _fold(self._hashes)

    def copy(self) -> CompactRange:
        return CompactRange(self._size, self._hashes)


def root_from_leaf_hashes(leaves: Iterable[bytes]) -> bytes:
    """The root of the tree whose leaves have these hashes (``O(n)``, constant extra memory per
    level)."""
    edge = CompactRange()
    for leaf in leaves:
        edge.append(leaf)
    return edge.root()
