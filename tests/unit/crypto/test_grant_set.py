"""The grant-set digest (issue 29): owner and registry hash the same set to the same bytes,
whatever its order or repetition; a grant added, removed or switched to EXPERIMENTAL changes it;
the bytes hashed are the documented ones."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from sealbench.contract.workload import GRANT_SET_VERSION, WorkloadIdentity, grant_set_digest

IMAGE = "sha256:" + "1" * 64
MODEL = "sha256:" + "e" * 64


def grant(n: int, *, data: bool = True, experimental: bool = False
          ) -> tuple[WorkloadIdentity, bool]:
    recipient = "sha256:" + f"{n:064x}"
    return (WorkloadIdentity(IMAGE, ("sha256:" + "d" * 64) if data else None,  # type: ignore[arg-type]
                             MODEL, recipient, str(n + 1), "brats-2023-gli/1"),  # type: ignore[arg-type]
            experimental)


def test_known_answer_of_the_documented_bytes() -> None:
    one = grant(1)
    text = f"{GRANT_SET_VERSION}\n{one[0].uid()} stable\n"
    assert grant_set_digest([one]) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    empty = f"{GRANT_SET_VERSION}\n".encode()
    assert grant_set_digest(()) == "sha256:" + hashlib.sha256(empty).hexdigest()


@given(st.lists(st.integers(0, 20), max_size=12), st.randoms())
def test_order_and_repetition_do_not_matter(ns: list[int], rnd: object) -> None:
    grants = [grant(n) for n in ns]
    shuffled = list(grants) * 2
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert grant_set_digest(shuffled) == grant_set_digest(grants)


def test_an_added_grant_changes_the_digest() -> None:
    assert grant_set_digest([grant(1), grant(2)]) != grant_set_digest([grant(1)])


def test_experimental_allowance_changes_the_digest() -> None:
    """A benchmark that starts accepting EXPERIMENTAL images changes the key-release condition,
    so the owner's grants lag until it syncs."""
    assert grant_set_digest([grant(1, experimental=True)]) != grant_set_digest([grant(1)])


def test_open_dataset_grant_differs_from_a_dataset_bound_one() -> None:
    assert grant_set_digest([grant(1, data=False)]) != grant_set_digest([grant(1)])
