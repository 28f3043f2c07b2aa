"""Privacy budgets (issue 25): each dataset (or budget group) has a lifetime budget its owner
sets; the registry charges every accepted release to it, refuses a release that would overspend
it or that is not the release the benchmark's plug-in declares (storing nothing: no result, no
debit, no audit event), logs every charge in the transparency log, and shows the spend.

The benchmark's plug-in here is a fake (:class:`ReleasingPlugin`, passed to ``create_app``):
its public summary is ``{"release": <sealbench/dp-release>}``, the contract the shipped plug-ins
publish, and it does not check the release against its own spec, so the refusals below are the
registry's own."""

from __future__ import annotations

import base64
import itertools
import json
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
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
    rho_of,
)
from sealbench.crypto import tlog
from sealbench.crypto.note import VerifierKey, open_checkpoint
from sealbench.server.app import create_app
from sealbench.server.audit_format import event_leaf_hash
from sealbench.server.errors import PrivacyBudgetExceededError, ResultRejectedError
from sealbench.server.schemas.audit import AuditEventPublic
from sealbench.server.schemas.budgets import DEFAULT_BUDGET_DELTA, DEFAULT_BUDGET_EPSILON
from sealbench.server.services.budgets import Budget, Ledger, checked_release

API = "/api/v1"
PIN = "brats-2023-gli/1"  # the world's benchmark pins it; results are read by the fake
SPEC = ReleaseSpec(columns=(Column("dice:WT", 0.0, 1.0), Column("dice:TC", 0.0, 1.0)),
                   epsilon=1.0, delta=1e-6)
ROWS = np.array([[0.9, 0.8], [0.7, 0.6], [0.8, 0.9]])
_n = itertools.count(1)


@dataclass(frozen=True)
class ReleasingSummary:
    release: Release

    @property
    def n_cases(self) -> int:
        return self.release.n_cases

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release.to_json()}


@dataclass(frozen=True)
class SplitSummary(ReleasingSummary):
    """A summary that splits its release between a Laplace headline and the breakdown
    (issue 41): it cost both."""

    headline: Release | None = None

    @property
    def releases(self) -> tuple[Release, ...]:
        return (self.release,) if self.headline is None else (self.headline, self.release)

    def to_json(self) -> dict[str, Any]:
        headline = {} if self.headline is None else {"headline": self.headline.to_json()}
        return {"release": self.release.to_json(), **headline}


@dataclass(frozen=True)
class PlainSummary:
    """A summary of a plug-in from before releases: nothing to charge."""

    n_cases: int

    def to_json(self) -> dict[str, Any]:
        return {"n_cases": self.n_cases}


class ReleasingPlugin:
    """A lax fake plug-in: parses ``{"release": ...}`` (or ``{"n_cases": n}``, a summary of a
    plug-in without releases) and leaves the check against :attr:`release_spec` to the
    registry."""

    ref = BenchmarkPin.parse(PIN)
    small_cell_minimum = 1

    def __init__(self, spec: ReleaseSpec) -> None:
        self.release_spec = spec

    def data_contract(self) -> dict[str, Any]:
        """The installed plug-in's contract (the registry compares its grid at benchmark
        create)."""
        return load(self.ref).data_contract()

    def parse_summary(self, doc: Mapping[str, Any]) -> ReleasingSummary | PlainSummary:
        if "release" not in doc:
            return PlainSummary(int(doc["n_cases"]))
        try:
            if "headline" in doc:
                return SplitSummary(Release.from_json(doc["release"]),
                                    Release.from_json(doc["headline"]))
            return ReleasingSummary(Release.from_json(doc["release"]))
        except ReleaseError as exc:
            raise SummaryError(str(exc)) from exc


@pytest.fixture
def plugin() -> ReleasingPlugin:
    return ReleasingPlugin(SPEC)


@pytest.fixture
def client(settings: Any, clock: Any, jwks_fetcher: Any,
           plugin: ReleasingPlugin) -> Iterator[TestClient]:
    """The registry with the fake plug-in behind the world's pin (others: the installed)."""
    app = create_app(settings, clock=clock, jwks_fetcher=jwks_fetcher,
                     plugins=lambda ref: plugin if str(ref) == PIN else load(ref))
    with TestClient(app) as test_client:
        yield test_client


def _release(spec: ReleaseSpec = SPEC) -> Release:
    return release(ROWS[:, :spec.width], spec, InsecureFixedNoise((0.25, -0.5)))


def _summary(aggregates: dict[str, Any]) -> dict[str, Any]:
    return {"format": "sealbench/result-summary", "version": 1, "run_id": f"run-{next(_n)}",
            "benchmark_id": "1", "metrics_version": PIN, "aggregates": aggregates}


def _body(world: Any, h: Any, tokens: Any, aggregates: dict[str, Any],
          dataset: tuple[int, str] | None = None) -> dict[str, Any]:
    dataset_id, digest = dataset or (world.dataset_id, world.dataset_digest)
    summary = _summary(aggregates)
    sealed = "sha256:" + f"{next(_n):064x}"
    claims = h.result_claims(summary=summary, sealed_digest=sealed,
                             benchmark_id=world.benchmark_id, data_digest=digest,
                             model_digest=world.model_digest)
    return {"benchmark_id": world.benchmark_id, "dataset_id": dataset_id,
            "model_id": world.model_id, "summary": summary, "sealed_result_digest": sealed,
            "attestation_token": tokens.sign(claims)}


def _post(client: TestClient, world: Any, body: dict[str, Any]) -> Any:
    return client.post(f"{API}/results", json=body, headers=world.data_owner.headers)


def _submit(client: TestClient, world: Any, h: Any, tokens: Any, rel: Release,
            dataset: tuple[int, str] | None = None) -> Any:
    return _post(client, world, _body(world, h, tokens, {"release": rel.to_json()}, dataset))


def _register(client: TestClient, owner: Any, h: Any, name: str, **budget: Any) -> Any:
    return client.post(f"{API}/datasets", headers=owner.headers, json={
        "name": name, "digest": h.digest_of(name), "case_count": 3, **budget})


def _joined(client: TestClient, world: Any, h: Any, name: str, **budget: Any) -> tuple[int, str]:
    """A dataset of the world's data owner, approved in the world's benchmark."""
    did = h.ok(_register(client, world.data_owner, h, name, **budget), 201)["id"]
    bench = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(bench, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    h.ok(client.post(f"{bench}/{did}/approve", headers=world.bench_owner.headers))
    return did, h.digest_of(name)


def _budget(client: TestClient, actor: Any, dataset_id: int) -> dict[str, Any]:
    r = client.get(f"{API}/datasets/{dataset_id}/budget", headers=actor.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _results(client: TestClient, world: Any) -> list[Any]:
    return list(client.get(f"{API}/results", headers=world.bench_owner.headers).json()["items"])


def _log_size(client: TestClient, world: Any) -> int:
    return int(client.get(f"{API}/audit/checkpoint", headers=world.other.headers)
               .json()["tree_size"])


def _fits(releases: float) -> float:
    """A budget epsilon (at delta 1e-6) holding ``releases`` releases of SPEC."""
    assert SPEC.rho is not None
    return epsilon_of(releases * SPEC.rho, 1e-6)


# -- the ledger's arithmetic (no database) -----------------------------------------------------


def test_default_budget_holds_60_default_releases() -> None:
    """Each default release is truly (1, 1e-6)-DP on the exact curve (issue 41), so the default
    budget (10, 1e-6) holds 60 of them (77 under the looser zCDP conversion, each of which was
    truly (0.776, 1e-6)-DP; tests/unit/contract/test_privacy_loss.py)."""
    ledger = Ledger(Budget(DEFAULT_BUDGET_EPSILON, DEFAULT_BUDGET_DELTA))
    assert SPEC.rho is not None
    assert ledger.releases_left(SPEC.rho) == 60
    assert ledger.releases_left(SPEC.loss) == 60
    assert epsilon_of(60 * SPEC.rho, 1e-6) <= 10.0 < epsilon_of(61 * SPEC.rho, 1e-6)


def test_ledger_refuses_the_release_that_does_not_fit() -> None:
    assert SPEC.rho is not None
    ledger = Ledger(Budget(_fits(2), 1e-6))
    ledger = ledger.after(_release(), "dataset 1").after(_release(), "dataset 1")
    assert math.isclose(ledger.spent_rho, 2 * SPEC.rho) and ledger.releases_left(SPEC.rho) == 0
    with pytest.raises(PrivacyBudgetExceededError, match=r"spent epsilon .* remaining epsilon"):
        ledger.after(_release(), "dataset 1")


def test_exact_release_costs_no_rho() -> None:
    ledger = Ledger(Budget(1.0, 1e-6))
    exact = _release(replace(SPEC, exact=True))
    assert ledger.after(exact, "dataset 1").spent_rho == 0.0


@pytest.mark.parametrize("spec", [replace(SPEC, epsilon=5.0), replace(SPEC, exact=True),
                                  replace(SPEC, columns=SPEC.columns[:1])],
                         ids=["raised-epsilon", "noise-off", "other-content"])
def test_release_not_the_declared_one_refused(spec: ReleaseSpec) -> None:
    with pytest.raises(ResultRejectedError, match="not the one brats-2023-gli/1 declares"):
        checked_release(ReleasingPlugin(SPEC), ReleasingSummary(_release(spec)))  # type: ignore[arg-type]


def test_summary_without_a_release_is_not_charged() -> None:
    assert checked_release(ReleasingPlugin(SPEC), PlainSummary(3)) is None  # type: ignore[arg-type]
    assert checked_release(ReleasingPlugin(SPEC), None) is None  # type: ignore[arg-type]


# -- registration --------------------------------------------------------------------------------


def test_dataset_budget_defaults_to_epsilon_10_at_delta_1e6(
    client: TestClient, world: Any
) -> None:
    dataset = client.get(f"{API}/datasets/{world.dataset_id}", headers=world.other.headers).json()
    assert (dataset["budget_epsilon"], dataset["budget_delta"]) == (10.0, 1e-6)
    budget = _budget(client, world.other, world.dataset_id)
    assert math.isclose(budget["budget_rho"], rho_of(10.0, 1e-6))
    assert (budget["spent_rho"], budget["spent_epsilon"], budget["group"]) == (0.0, 0.0, None)
    assert math.isclose(budget["remaining_epsilon"], 10.0)
    assert budget["datasets"] == [world.dataset_id] and budget["debits"] == []
    [cost] = budget["costs"]
    assert (cost["benchmark_id"], cost["association"], cost["epsilon"], cost["delta"]) == (
        world.benchmark_id, "approved", 1.0, 1e-6)
    assert math.isclose(cost["rho"], SPEC.rho or 0) and cost["releases_left"] == 60


def test_registration_logs_the_budget(client: TestClient, world: Any, h: Any) -> None:
    created = h.ok(_register(client, world.data_owner, h, "logged", budget_epsilon=4.0,
                             budget_delta=1e-7), 201)
    assert (created["budget_epsilon"], created["budget_delta"]) == (4.0, 1e-7)
    events = client.get(f"{API}/audit", headers=world.admin.headers).json()["items"]
    [event] = [e for e in events if e["action"] == "dataset.create"
               and e["entity_id"] == str(created["id"])]
    payload = json.loads(event["payload"])
    assert (payload["budget_epsilon"], payload["budget_delta"], payload["budget_group"]) == (
        4.0, 1e-7, None)


@pytest.mark.parametrize("budget", [{"budget_epsilon": 0}, {"budget_epsilon": -1.0},
                                    {"budget_epsilon": 1e6}, {"budget_delta": 0.5},
                                    {"budget_delta": 0}, {"budget_group": "no spaces"}])
def test_unusable_budget_refused(client: TestClient, world: Any, h: Any,
                                 budget: dict[str, Any]) -> None:
    r = _register(client, world.data_owner, h, f"bad{next(_n)}", **budget)
    assert r.status_code == 422, r.text


def test_joining_a_group_with_another_budget_refused(
    client: TestClient, world: Any, h: Any
) -> None:
    h.ok(_register(client, world.data_owner, h, "a1", budget_group="cohort",
                   budget_epsilon=3.0), 201)
    r = _register(client, world.data_owner, h, "a2", budget_group="cohort", budget_epsilon=5.0)
    assert r.status_code == 409, r.text
    assert "budget group cohort has the budget epsilon 3 at delta 1e-06" in r.json()["message"]
    # joining without stating a budget takes the group's
    joined = h.ok(_register(client, world.data_owner, h, "a3", budget_group="cohort"), 201)
    assert joined["budget_epsilon"] == 3.0
    # group names are per owner: another owner's "cohort" is another group
    theirs = h.ok(_register(client, world.other, h, "b1", budget_group="cohort"), 201)
    assert theirs["budget_epsilon"] == DEFAULT_BUDGET_EPSILON
    assert _budget(client, world.other, theirs["id"])["datasets"] == [theirs["id"]]


# -- charging accepted results --------------------------------------------------------------------


def test_accepted_release_debited(client: TestClient, world: Any, h: Any, tokens: Any) -> None:
    rel = _release()
    result = h.ok(_submit(client, world, h, tokens, rel), 201)
    budget = _budget(client, world.data_owner, world.dataset_id)
    [debit] = budget["debits"]
    assert (debit["result_id"], debit["dataset_id"], debit["benchmark_id"], debit["exact"]) == (
        result["id"], world.dataset_id, world.benchmark_id, False)
    assert (debit["rho"], debit["epsilon"], debit["delta"]) == (rel.rho, 1.0, 1e-6)
    assert budget["spent_rho"] == rel.rho and math.isclose(budget["spent_epsilon"], 1.0)
    assert budget["releases"] == 1 and budget["costs"][0]["releases_left"] == 59


def test_release_over_budget_refused_nothing_stored(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    small = _joined(client, world, h, "small", budget_epsilon=_fits(2))
    for _ in range(2):
        h.ok(_submit(client, world, h, tokens, _release(), small), 201)
    stored, size = _results(client, world), _log_size(client, world)
    r = _submit(client, world, h, tokens, _release(), small)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "privacy_budget_exceeded"
    message = r.json()["message"]
    assert f"dataset {small[0]}'s privacy budget" in message
    assert f"spent epsilon {_fits(2):.4g}, remaining epsilon " in message
    assert "this release costs epsilon 1; nothing was stored" in message
    assert "rho" not in message  # a hospital reads epsilon, never rho (issue 45 part 3)
    assert "nothing was stored" in message
    assert _results(client, world) == stored and _log_size(client, world) == size
    assert len(_budget(client, world.data_owner, small[0])["debits"]) == 2


def test_operator_raised_epsilon_refused_by_registry(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """An operator who raised epsilon (or turned the noise off) in the enclave's release gets a
    summary the plug-in's pin does not declare: refused, nothing stored, nothing charged."""
    size = _log_size(client, world)
    for spec in (replace(SPEC, epsilon=8.0), replace(SPEC, exact=True)):
        r = _submit(client, world, h, tokens, _release(spec))
        assert r.status_code == 422 and r.json()["code"] == "result_rejected", r.text
        assert "epsilon 1 at delta 1e-06 per release" in r.json()["message"]
    assert _results(client, world) == [] and _log_size(client, world) == size
    assert _budget(client, world.data_owner, world.dataset_id)["debits"] == []


def test_debit_logged_in_transparency_log(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    rel = _release()
    result = h.ok(_submit(client, world, h, tokens, rel), 201)
    [debit] = _budget(client, world.data_owner, world.dataset_id)["debits"]
    proof = h.ok(client.get(f"{API}/audit/inclusion?seq={debit['audit_seq']}",
                            headers=world.data_owner.headers))
    event = AuditEventPublic.model_validate(proof["event"])
    assert (event.action, event.entity_type, event.entity_id) == (
        "privacy.debit", "dataset", str(world.dataset_id))
    payload = json.loads(event.payload)
    assert (payload["result_id"], payload["dataset_id"], payload["mechanism"]) == (
        result["id"], world.dataset_id, "gaussian")
    assert (payload["rho"], payload["epsilon"], payload["delta"]) == (rel.rho, 1.0, 1e-6)
    assert payload["spent_rho"] == rel.rho
    assert math.isclose(payload["remaining_rho"], rho_of(10.0, 1e-6) - (rel.rho or 0))
    keys = [VerifierKey.from_string(k["verifier"]) for k in
            client.get(f"{API}/audit/checkpoint", headers=world.other.headers).json()["keys"]]
    cp = open_checkpoint(proof["checkpoint"].encode(), keys).checkpoint
    tlog.verify_inclusion(event_leaf_hash(event), proof["leaf_index"], cp.size,
                          [base64.b64decode(p) for p in proof["proof"]], cp.root_hash)


def test_budget_group_shares_one_ledger(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """Two datasets sharing cases, in one group holding two releases: one release on each
    spends the group's budget, and a third on either is refused."""
    first = _joined(client, world, h, "site-a", budget_group="shared", budget_epsilon=_fits(2))
    second = _joined(client, world, h, "site-b", budget_group="shared")
    h.ok(_submit(client, world, h, tokens, _release(), first), 201)
    h.ok(_submit(client, world, h, tokens, _release(), second), 201)
    for dataset in (first, second):
        r = _submit(client, world, h, tokens, _release(), dataset)
        assert r.status_code == 422 and r.json()["code"] == "privacy_budget_exceeded", r.text
        assert "budget group shared's privacy budget" in r.json()["message"]
    a, b = (_budget(client, world.data_owner, d[0]) for d in (first, second))
    assert a["group"] == b["group"] == "shared" and a["datasets"] == [first[0], second[0]]
    assert a["debits"] == b["debits"] and len(a["debits"]) == 2
    assert a["spent_rho"] == b["spent_rho"] == 2 * (SPEC.rho or 0)
    # the world's own dataset, outside the group, is untouched
    assert _budget(client, world.data_owner, world.dataset_id)["spent_rho"] == 0.0


def test_resubmission_debits_once(client: TestClient, world: Any, h: Any, tokens: Any) -> None:
    body = _body(world, h, tokens, {"release": _release().to_json()})
    h.ok(_post(client, world, body), 201)
    again = _post(client, world, body)
    assert again.status_code == 409, again.text
    budget = _budget(client, world.data_owner, world.dataset_id)
    assert len(budget["debits"]) == 1 and budget["spent_rho"] == SPEC.rho


def test_exact_release_needs_consent_and_shows_no_cost(
    client: TestClient, world: Any, h: Any, tokens: Any, plugin: ReleasingPlugin
) -> None:
    """A plug-in that declares an exact release on a plain pin, after the dataset joined without
    consenting: the release is refused (no result, no debit) and the budget shows the benchmark's
    release as exact, costing no rho (an accepted exact release's debit: test_exact_consent)."""
    plugin.release_spec = replace(SPEC, exact=True)
    r = _submit(client, world, h, tokens, _release(plugin.release_spec))
    assert r.status_code == 422 and "not consented" in r.text
    budget = _budget(client, world.data_owner, world.dataset_id)
    assert budget["debits"] == [] and _results(client, world) == []
    [cost] = budget["costs"]
    assert (cost["exact"], cost["rho"], cost["releases_left"]) == (True, None, None)


def test_summary_of_a_plugin_without_releases_not_charged(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    h.ok(_post(client, world, _body(world, h, tokens, {"n_cases": 3})), 201)
    assert _budget(client, world.data_owner, world.dataset_id)["debits"] == []


def test_budget_of_missing_dataset_not_found(client: TestClient, world: Any) -> None:
    assert client.get(f"{API}/datasets/999/budget", headers=world.other.headers).status_code == 404


def test_concurrent_submissions_cannot_both_spend_the_last_release(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """Six results at once for a budget holding one release: the ledger is locked before its
    spend is read, so exactly one is accepted and charged."""
    one = _joined(client, world, h, "one-left", budget_epsilon=_fits(1))
    bodies = [_body(world, h, tokens, {"release": _release().to_json()}, one) for _ in range(6)]
    barrier = threading.Barrier(len(bodies))
    codes: list[int] = []

    def submit(body: dict[str, Any]) -> None:
        barrier.wait()
        codes.append(_post(client, world, body).status_code)

    threads = [threading.Thread(target=submit, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(codes) == [201, 422, 422, 422, 422, 422]
    assert len(_budget(client, world.data_owner, one[0])["debits"]) == 1


# -- Laplace releases on the ledger (issue 41) ----------------------------------------------------


def test_ledger_charges_a_laplace_release_its_pure_epsilon() -> None:
    laplace = replace(SPEC, mechanism="laplace", epsilon=0.5)
    ledger = Ledger(Budget(1.0, 1e-6))
    assert ledger.releases_left(laplace.loss) == 2
    ledger = ledger.after(_release(laplace), "dataset 1").after(_release(laplace), "dataset 1")
    assert ledger.spent.laplace == (0.5, 0.5) and ledger.spent_rho == 0.0
    assert ledger.releases_left(laplace.loss) == 0
    assert ledger.remaining_rho <= 1e-9 * ledger.budget.rho  # the budget's slack at most
    with pytest.raises(PrivacyBudgetExceededError, match=r"this release costs epsilon 0\.5;"):
        ledger.after(_release(laplace), "dataset 1")


def test_a_gaussian_release_does_not_fit_where_laplace_spend_filled_the_budget() -> None:
    """The Gaussian rho alone would fit; with the Laplace spend composed in, it does not."""
    laplace = replace(SPEC, mechanism="laplace", epsilon=1.5)
    ledger = Ledger(Budget(2.0, 1e-6)).after(_release(laplace), "dataset 1")
    assert SPEC.rho is not None and SPEC.rho < ledger.budget.rho
    assert 0 < ledger.remaining_rho < SPEC.rho
    with pytest.raises(PrivacyBudgetExceededError):
        ledger.after(_release(), "dataset 1")


def test_ledger_payload_states_the_laplace_spend_compactly() -> None:
    laplace = replace(SPEC, mechanism="laplace", epsilon=0.25)
    ledger = Ledger(Budget(10.0, 1e-6))
    for _ in range(3):
        ledger = ledger.after(_release(laplace), "dataset 1")
    ledger = ledger.after(_release(), "dataset 1")
    payload = ledger.payload()
    assert payload["spent_laplace"] == [[0.25, 3]]
    assert math.isclose(float(payload["spent_epsilon"]),  # type: ignore[arg-type]
                        ledger.spent.epsilon_at(1e-6))
    assert "spent_laplace" not in Ledger(Budget(10.0, 1e-6)).payload()


def test_a_split_summary_is_charged_both_its_releases(
    client: TestClient, world: Any, h: Any, tokens: Any
) -> None:
    """A site's summary whose headline is a Laplace release beside the Gaussian breakdown: the
    debit is the two composed (charging only the breakdown would let the headline go free)."""
    headline = release(ROWS[:, :1], ReleaseSpec(columns=(Column("auroc", 0.0, 1.0),),
                                                epsilon=0.5, mechanism="laplace"),
                       InsecureFixedNoise())
    breakdown = _release()
    body = _body(world, h, tokens, {"release": breakdown.to_json(),
                                    "headline": headline.to_json()})
    h.ok(_post(client, world, body), 201)
    budget = _budget(client, world.data_owner, world.dataset_id)
    [debit] = budget["debits"]
    assert debit["rho"] == breakdown.rho and debit["laplace"] == [0.5]
    spent = (breakdown.loss + headline.loss).epsilon_at(1e-6)
    assert math.isclose(budget["spent_epsilon"], spent) and spent > 1.0


def test_a_gaussian_release_where_laplace_is_declared_is_refused_by_name() -> None:
    """An operator swapping the declared mechanism (Laplace's noise for the Gaussian's, or the
    reverse) is refused, and the refusal says what was declared and what came."""
    laplace = replace(SPEC, mechanism="laplace")
    with pytest.raises(ResultRejectedError, match=r"\(Laplace epsilon 1 per release.*"
                                                  r"received epsilon 1 at delta 1e-06"):
        checked_release(ReleasingPlugin(laplace), ReleasingSummary(_release()))  # type: ignore[arg-type]
    with pytest.raises(ResultRejectedError, match="received Laplace epsilon 1"):
        checked_release(ReleasingPlugin(SPEC), ReleasingSummary(_release(laplace)))  # type: ignore[arg-type]
