"""The library functions behind ``association approve``, ``dataset associate`` and ``dataset
register`` (issue 26): what they decide without printing, on a stand-in registry client."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from sealbench.client.assets import lifecycle
from sealbench.client.errors import ConflictError
from sealbench.client.registry import governance


def _link(status: str, revision: int = 1, asset_id: int = 7, consent: bool = False) -> Any:
    return SimpleNamespace(asset_id=asset_id, status=status, revision=revision,
                           exact_release_consent=consent)


@dataclass
class FakeClient:
    links: list[Any] = field(default_factory=list)
    owner_id: int = 1
    me_id: int = 2
    conflict: bool = False
    decided: list[tuple[Any, ...]] = field(default_factory=list)

    def list_associations(self, kind: str, benchmark: int) -> list[Any]:
        return self.links

    def get_benchmark(self, benchmark: int) -> Any:
        return SimpleNamespace(id=benchmark, owner_id=self.owner_id)

    def get_dataset(self, dataset: int) -> Any:
        return SimpleNamespace(id=dataset, owner_id=self.me_id, prepared_for_id=None)

    def me(self) -> Any:
        return SimpleNamespace(id=self.me_id)

    def decide_association(self, kind: str, benchmark: int, asset: int, *, approve: bool,
                           exact_release_consent: bool) -> Any:
        self.decided.append((kind, benchmark, asset, approve, exact_release_consent))
        return _link("approved" if approve else "rejected", revision=2, asset_id=asset)

    def request_association(self, kind: str, benchmark: int, asset: int, *,
                            exact_release_consent: bool) -> Any:
        if self.conflict:
            raise ConflictError("exists")
        return _link("pending", asset_id=asset)


def test_an_approved_link_is_not_approved_again() -> None:
    client = FakeClient(links=[_link("pending", 1), _link("approved", 2)])
    done = governance.decide_association(client, "dataset", 3, 7, approve=True)  # type: ignore[arg-type]
    assert done.already and done.row.revision == 2 and client.decided == []


def test_the_data_owner_consents_before_approving() -> None:
    seen: list[Any] = []
    client = FakeClient(links=[_link("pending")])
    done = governance.decide_association(
        client, "dataset", 3, 7, approve=True, consent_exact=True,  # type: ignore[arg-type]
        consent=lambda _c, bench, dataset: seen.append((bench.id, dataset)))
    assert not done.already and done.row.status == "approved"
    assert seen == [(3, 7)]  # the approver is not the benchmark's owner: the data owner
    assert client.decided == [("dataset", 3, 7, True, True)]


def test_the_authority_approving_a_dataset_gives_no_consent() -> None:
    seen: list[Any] = []
    client = FakeClient(links=[_link("pending")], owner_id=2, me_id=2)
    governance.decide_association(
        client, "dataset", 3, 7, approve=True, consent_exact=True,  # type: ignore[arg-type]
        consent=lambda _c, _b, dataset: seen.append(dataset))
    assert seen == [None] and client.decided == [("dataset", 3, 7, True, False)]


def test_asking_again_to_join_changes_nothing() -> None:
    client = FakeClient(links=[_link("pending")], conflict=True)
    done = lifecycle.associate_asset(client, "dataset", 7, 3)  # type: ignore[arg-type]
    assert done.already and done.row.status == "pending"


def test_a_refused_consent_sends_nothing() -> None:
    client = FakeClient()

    def refuse(*_: Any) -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        lifecycle.associate_asset(client, "dataset", 7, 3, consent=refuse)  # type: ignore[arg-type]


def test_a_registration_made_before_says_which_budget_it_keeps() -> None:
    dataset = SimpleNamespace(budget_epsilon=1.0, budget_delta=1e-6)
    body = SimpleNamespace(budget_epsilon=2.0, budget_delta=None)
    done = lifecycle.DatasetRegistration(dataset, body, already=True)  # type: ignore[arg-type]
    assert done.kept() == ("budget epsilon 1 (you asked 2)",)
    assert lifecycle.DatasetRegistration(dataset, body, already=False).kept() == ()  # type: ignore[arg-type]
