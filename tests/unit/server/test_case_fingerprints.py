"""One privacy budget per set of patients (issue 40, part 3): a dataset registered with the case
fingerprints of an earlier dataset of the same owner shares that dataset's ledger, spend
included; a registration asking for a fresh budget or bridging two ledgers is refused with
nothing stored; the fingerprints never leave the registry.

The fingerprints here are arbitrary 64-hex strings: the registry only compares them (the client
computes them: tests/unit/client/test_case_fingerprints.py)."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sealbench.benchmarks.interface import BenchmarkPin, SummaryError
from sealbench.benchmarks.registry import load
from sealbench.benchmarks.release import (
    Column,
    InsecureFixedNoise,
    Release,
    ReleaseError,
    ReleaseSpec,
    epsilon_of,
    release,
)
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.services.fingerprints import overlap_groups, shares_cases

API = "/api/v1"
PIN = "brats-2023-gli/1"
SPEC = ReleaseSpec(columns=(Column("dice:WT", 0.0, 1.0),), epsilon=1.0, delta=1e-6)
_n = itertools.count(1)


@dataclass(frozen=True)
class ReleasingSummary:
    release: Release

    @property
    def n_cases(self) -> int:
        return self.release.n_cases

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release.to_json()}


class ReleasingPlugin:
    """A lax fake plug-in behind the world's pin: parses ``{"release": ...}`` (a one-column
    release); everything else is the installed plug-in's."""

    ref = BenchmarkPin.parse(PIN)
    small_cell_minimum = 1
    release_spec = SPEC

    def __getattr__(self, name: str) -> Any:
        return getattr(load(self.ref), name)  # the contract and the rest: the real plug-in's

    def parse_summary(self, doc: Mapping[str, Any]) -> Any:
        try:
            made = Release.from_json(doc["release"])
        except (ReleaseError, KeyError) as exc:
            raise SummaryError(str(exc)) from exc

        return ReleasingSummary(made)


@pytest.fixture
def client(settings: Any, clock: Any, jwks_fetcher: Any) -> Iterator[TestClient]:
    plugin = ReleasingPlugin()
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher,
                     plugins=lambda ref: plugin if str(ref) == PIN else load(ref))
    with TestClient(app) as test_client:
        yield test_client


def _prints(*labels: int) -> list[str]:
    """Fingerprints (sorted, as the client sends them) of the cases labelled ``labels``."""
    return sorted(f"{label:064x}" for label in labels)


def _register(client: TestClient, owner: Any, h: Any, name: str, cases: list[str] | None,
              **budget: Any) -> Any:
    body: dict[str, Any] = {"name": name, "digest": h.digest_of(name),
                            "case_count": 3 if cases is None else len(cases), **budget}
    if cases is not None:
        body["case_fingerprints"] = cases
    return client.post(f"{API}/datasets", headers=owner.headers, json=body)


def _joined(client: TestClient, world: Any, h: Any, name: str, cases: list[str] | None,
            **budget: Any) -> tuple[int, str]:
    did = h.ok(_register(client, world.data_owner, h, name, cases, **budget), 201)["id"]
    bench = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(bench, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    h.ok(client.post(f"{bench}/{did}/approve", headers=world.bench_owner.headers))
    return did, h.digest_of(name)


def _submit(client: TestClient, world: Any, h: Any, tokens: Any,
            dataset: tuple[int, str]) -> Any:
    made = release(np.array([[0.9], [0.7], [0.8]]), SPEC, InsecureFixedNoise((0.25,)))
    summary = {"format": "sealbench/result-summary", "version": 1, "run_id": f"run-{next(_n)}",
               "benchmark_id": "1", "metrics_version": PIN,
               "aggregates": {"release": made.to_json()}}
    sealed = "sha256:" + f"{next(_n):064x}"
    claims = h.result_claims(summary=summary, sealed_digest=sealed,
                             benchmark_id=world.benchmark_id, data_digest=dataset[1],
                             model_digest=world.model_digest)
    return client.post(f"{API}/results", headers=world.data_owner.headers, json={
        "benchmark_id": world.benchmark_id, "dataset_id": dataset[0], "model_id": world.model_id,
        "summary": summary, "sealed_result_digest": sealed,
        "attestation_token": tokens.sign(claims)})


def _budget(client: TestClient, actor: Any, dataset_id: int) -> dict[str, Any]:
    r = client.get(f"{API}/datasets/{dataset_id}/budget", headers=actor.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _state(client: TestClient, world: Any) -> tuple[Any, int]:
    """Every dataset and the log's size: what a refused registration must leave unchanged."""
    datasets = client.get(f"{API}/datasets", headers=world.other.headers).json()["items"]
    size = client.get(f"{API}/audit/checkpoint", headers=world.other.headers).json()["tree_size"]
    return datasets, int(size)


def _fits(releases: float) -> float:
    assert SPEC.rho is not None
    return epsilon_of(releases * SPEC.rho, 1e-6)


def test_reregistered_cases_share_the_earlier_datasets_spend(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """Dataset A (budget: 3 releases) spends 2; the same cases plus new ones registered as B
    join A's ledger with A's spend: one release fits on either, then neither has any left."""
    a = _joined(client, world, h, "cohort", _prints(1, 2, 3), budget_epsilon=_fits(3))
    for _ in range(2):
        h.ok(_submit(client, world, h, tokens, a), 201)
    b = _joined(client, world, h, "cohort-again", _prints(2, 3, 4, 5))
    seen_a, seen_b = _budget(client, world.data_owner, a[0]), _budget(client, world.other, b[0])
    assert seen_a["group"] == seen_b["group"] == "cases-of-cohort"
    assert seen_a["datasets"] == seen_b["datasets"] == [a[0], b[0]]
    assert seen_b["budget_epsilon"] == _fits(3) and seen_b["releases"] == 2
    assert seen_b["spent_rho"] == seen_a["spent_rho"] == 2 * (SPEC.rho or 0)
    h.ok(_submit(client, world, h, tokens, b), 201)
    for dataset in (a, b):
        r = _submit(client, world, h, tokens, dataset)
        assert r.status_code == 422 and r.json()["code"] == "privacy_budget_exceeded", r.text
        assert "budget group cases-of-cohort's privacy budget" in r.json()["message"]
    assert len(_budget(client, world.data_owner, a[0])["debits"]) == 3
    # the join is in the log: the earlier dataset's move into the group made for it
    events = client.get(f"{API}/audit?limit=100", headers=world.admin.headers).json()
    moved = [e for e in events["items"] if e["action"] == "dataset.budget_group"]
    assert [json.loads(e["payload"])["dataset_id"] for e in moved] == [a[0]]


def test_reregistering_with_a_fresh_budget_refused_nothing_stored(
    client: TestClient, world: Any, h: Any
) -> None:
    a = h.ok(_register(client, world.data_owner, h, "first", _prints(7, 8),
                       budget_epsilon=2.0), 201)
    before = _state(client, world)
    for asked in ({"budget_epsilon": 100.0}, {"budget_delta": 1e-5}):
        r = _register(client, world.data_owner, h, "fresh", _prints(8, 9), **asked)
        assert r.status_code == 409, r.text
        message = r.json()["message"]
        assert f"these cases were registered before as dataset {a['id']} (first)" in message
        assert "never gives them a fresh budget" in message and "nothing was registered" in message
    assert _state(client, world) == before
    assert _budget(client, world.data_owner, a["id"])["group"] is None


def test_cases_of_two_ledgers_refused_naming_both(client: TestClient, world: Any, h: Any) -> None:
    a = h.ok(_register(client, world.data_owner, h, "left", _prints(1, 2)), 201)
    b = h.ok(_register(client, world.data_owner, h, "right", _prints(3, 4),
                       budget_group="right-group"), 201)
    before = _state(client, world)
    r = _register(client, world.data_owner, h, "both", _prints(2, 3))
    assert r.status_code == 409, r.text
    message = r.json()["message"]
    assert (f"dataset {a['id']} (left): its own budget; dataset {b['id']} (right): budget "
            "group right-group") in message and "nothing was registered" in message
    assert _state(client, world) == before


def test_overlap_joins_the_earlier_group_and_no_other(
    client: TestClient, world: Any, h: Any
) -> None:
    a = h.ok(_register(client, world.data_owner, h, "g1", _prints(1, 2), budget_group="g",
                       budget_epsilon=4.0), 201)
    h.ok(_register(client, world.data_owner, h, "elsewhere", _prints(50), budget_group="other"),
         201)
    before = _state(client, world)
    r = _register(client, world.data_owner, h, "g2", _prints(2, 3), budget_group="other")
    assert r.status_code == 409 and "cannot join budget group other" in r.json()["message"]
    assert "in budget group g" in r.json()["message"]
    assert _state(client, world) == before
    b = h.ok(_register(client, world.data_owner, h, "g2", _prints(2, 3)), 201)
    assert (b["budget_epsilon"], _budget(client, world.data_owner, b["id"])["datasets"]) == (
        4.0, [a["id"], b["id"]])


def test_overlap_with_a_new_named_group_takes_that_name(
    client: TestClient, world: Any, h: Any
) -> None:
    a = h.ok(_register(client, world.data_owner, h, "solo", _prints(5)), 201)
    b = h.ok(_register(client, world.data_owner, h, "solo-2", _prints(5, 6),
                       budget_group="mine"), 201)
    seen = _budget(client, world.data_owner, b["id"])
    assert (seen["group"], seen["datasets"]) == ("mine", [a["id"], b["id"]])


def test_another_owners_equal_fingerprints_are_another_ledger(
    client: TestClient, world: Any, h: Any
) -> None:
    """Fingerprints are keyed per owner, and the registry compares one owner's only."""
    h.ok(_register(client, world.data_owner, h, "theirs", _prints(1, 2)), 201)
    mine = h.ok(_register(client, world.other, h, "mine", _prints(1, 2),
                          budget_epsilon=50.0), 201)
    seen = _budget(client, world.other, mine["id"])
    assert (seen["group"], seen["budget_epsilon"], seen["datasets"]) == (None, 50.0,
                                                                          [mine["id"]])


def test_fingerprints_never_leave_the_registry(client: TestClient, world: Any, h: Any) -> None:
    cases = _prints(11, 12)
    a = h.ok(_register(client, world.data_owner, h, "private", cases), 201)
    h.ok(_register(client, world.data_owner, h, "private-2", cases), 201)
    seen = [
        json.dumps(a),
        client.get(f"{API}/datasets/{a['id']}", headers=world.data_owner.headers).text,
        client.get(f"{API}/datasets", headers=world.other.headers).text,
        client.get(f"{API}/datasets/{a['id']}/budget", headers=world.data_owner.headers).text,
        client.get(f"{API}/audit?limit=100", headers=world.admin.headers).text,
    ]
    for text in seen:
        assert not any(c in text for c in cases) and "fingerprint" not in text


@pytest.mark.parametrize(("cases", "count", "why"), [
    (["a" * 64, "b" * 64], 3, "one per case"),
    (["b" * 64, "a" * 64], 2, "must be sorted"),
    (["A" * 64, "b" * 64], 2, "pattern"),
    (["a" * 63, "b" * 64], 2, "pattern"),
])
def test_malformed_fingerprints_refused(
    client: TestClient, world: Any, h: Any, cases: list[str], count: int, why: str
) -> None:
    before = _state(client, world)
    r = client.post(f"{API}/datasets", headers=world.data_owner.headers, json={
        "name": "bad", "digest": h.digest_of("bad"), "case_count": count,
        "case_fingerprints": cases})
    assert r.status_code == 422 and why in r.text, r.text
    assert _state(client, world) == before


def test_equal_cases_within_one_dataset_accepted(client: TestClient, world: Any, h: Any) -> None:
    """Two rows of one dataset with equal content (a duplicate record) are one fingerprint
    twice: the dataset registers, and shares nothing with itself."""
    h.ok(_register(client, world.data_owner, h, "dup", ["c" * 64, "c" * 64]), 201)


def test_shares_cases_and_overlap_groups(
    client: TestClient, world: Any, h: Any, database_url: str
) -> None:
    a = h.ok(_register(client, world.data_owner, h, "pa", _prints(1, 2)), 201)["id"]
    b = h.ok(_register(client, world.data_owner, h, "pb", _prints(2, 3)), 201)["id"]
    c = h.ok(_register(client, world.data_owner, h, "pc", _prints(3, 4)), 201)["id"]
    d = h.ok(_register(client, world.data_owner, h, "pd", _prints(9)), 201)["id"]
    old = world.dataset_id  # registered without fingerprints
    db = open_database(database_url)
    try:
        with db.reader() as session:
            assert shares_cases(session, a, b) and shares_cases(session, b, a)
            assert not shares_cases(session, a, c) and not shares_cases(session, a, d)
            assert not shares_cases(session, a, a) and not shares_cases(session, old, a)
            assert overlap_groups(session, [d, c, b, a, old]) == [
                frozenset({old}), frozenset({a, b, c}), frozenset({d})]
            assert overlap_groups(session, [a, c]) == [frozenset({a}), frozenset({c})]
    finally:
        db.dispose()


def test_same_cases_registered_at_once_end_on_one_ledger(
    client: TestClient, world: Any, h: Any
) -> None:
    """Four registrations of the same cases at once: they queue (the owner's registrations one
    at a time), so the first gets a ledger and the three others share it, none a fresh one."""
    names = [f"race-{i}" for i in range(4)]
    barrier = threading.Barrier(len(names))
    made: list[Any] = []

    def register(name: str) -> None:
        barrier.wait()
        made.append(_register(client, world.data_owner, h, name, _prints(31, 32, 33)))

    threads = [threading.Thread(target=register, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(r.status_code for r in made) == [201] * 4, [r.text for r in made]
    ids = sorted(r.json()["id"] for r in made)
    ledgers = {json.dumps(_budget(client, world.data_owner, d)["datasets"]) for d in ids}
    assert ledgers == {json.dumps(ids)}
