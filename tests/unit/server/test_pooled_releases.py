"""TEE-pooled releases through the registry's API (issues 27 and 40): the authority asks the
registry to authorize a pool of a model (the registry chooses the inputs, debits every ledger
on its log and signs them), submits the aggregator's release with its attestation token (signed
with the test issuer's key, as result tokens are), and the registry verifies it against the
benchmark's aggregator image and exactly the authorization's inputs, and marks the figures on
the leaderboard; each refusal stores nothing and debits nothing more."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy import select

from sealbench.benchmarks.registry import load
from sealbench.benchmarks.release import epsilon_of
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.pool import (
    POOL_AUDIENCE,
    AggregateSpec,
    PoolAnchor,
    PooledInput,
    PooledRelease,
    PoolInputs,
    pooled_nonce,
)
from sealbench.contract.pool_authorization import PoolAuthorization, verify_authorization
from sealbench.crypto.canonical import canonical_json
from sealbench.crypto.errors import CryptoError
from sealbench.crypto.sealing import open_sealed, pooled_release_info, public_key_to_raw, seal
from sealbench.server.db import open_database
from sealbench.server.models import AuditEvent, Benchmark, LogKey, PrivacyDebit
from sealbench.server.models import PooledInput as PooledInputRow
from sealbench.server.models import PooledRelease as PooledReleaseRow

API = "/api/v1"
AGGREGATOR = "sha256:" + "a" * 64
PIN = "brats-2023-gli/1"
RHO = load(BenchmarkPin.parse(PIN)).release_spec.rho
PROVIDER = ("projects/200000000001/locations/global/workloadIdentityPools/hospital-pool"
            "/providers/attestation")


@dataclass
class Pool:
    """An approved benchmark pooling in the TEE, 3 datasets (each with coordinates and one
    accepted result sealing statistics) and 1 model."""

    client: TestClient
    world: Any
    h: Any
    tokens: Any
    database_url: str
    datasets: list[int]
    runs: dict[int, str]  # dataset id -> run id
    commitments: dict[str, str]  # run id -> commitment
    #: The registry's pool-release key, the benchmark's pool recipient.
    pool_key: X25519PrivateKey

    @property
    def recipient_b64(self) -> str:
        return base64.b64encode(public_key_to_raw(self.pool_key.public_key())).decode()

    def seal(self, release: bytes, inputs: PoolInputs, *, image: str = AGGREGATOR) -> bytes:
        """``pooled.json``'s bytes sealed as the aggregator seals them (to the registry)."""
        return seal(release, self.pool_key.public_key(),
                    pooled_release_info(inputs.pool_id, inputs.benchmark_id, image))

    def opened(self, sealed: bytes, inputs: PoolInputs) -> PooledRelease:
        return PooledRelease.from_bytes(open_sealed(sealed, self.pool_key, pooled_release_info(
            inputs.pool_id, inputs.benchmark_id, AGGREGATOR)))

    @property
    def bid(self) -> int:
        return int(self.world.benchmark_id)

    @property
    def anchor(self) -> PoolAnchor:
        anchor = PoolAnchor.of(self.rows(Benchmark)[0])
        assert anchor is not None
        return anchor

    def inputs(self, actor: Any = None) -> Any:
        """Ask the registry to authorize a pool of the model (the response)."""
        actor = actor or self.world.bench_owner
        return self.client.post(f"{API}/benchmarks/{self.bid}/pool-authorizations",
                                json={"model_id": self.world.model_id}, headers=actor.headers)

    def authorization(self, pool_id: str) -> PoolAuthorization:
        return PoolAuthorization.model_validate(self.h.ok(self.client.get(
            f"{API}/benchmarks/{self.bid}/pool-authorizations/{pool_id}",
            headers=self.world.bench_owner.headers)))

    def document(self) -> PoolInputs:
        """A fresh authorization's inputs document, its evidence verified as the aggregator
        verifies it."""
        body = self.h.ok(self.inputs(), 201)
        authorization = self.authorization(body["pool_id"])
        verify_authorization(authorization, self.anchor)
        return authorization.inputs

    def submit(self, inputs: PoolInputs, sealed: bytes, token: str) -> Any:
        return self.client.post(
            f"{API}/benchmarks/{self.bid}/pooled-releases", headers=self.world.bench_owner.headers,
            json={"sealed_release_b64": base64.b64encode(sealed).decode(),
                  "attestation_token": token, "inputs": inputs.model_dump(mode="json")})

    def rows(self, model: Any) -> list[Any]:
        db = open_database(self.database_url)
        try:
            with db.reader() as session:
                return list(session.scalars(select(model)).all())
        finally:
            db.dispose()


def release_of(pool: Pool, inputs: PoolInputs, *, used: list[PooledInput] | None = None,
               dice: float = 0.8, n_cases: int = 2000) -> bytes:
    """The aggregator's ``pooled.sealed`` for ``inputs`` (each input as given unless ``used``)."""
    return pool.seal(document_of(pool.h, inputs, used=used, dice=dice, n_cases=n_cases), inputs)


def document_of(h: Any, inputs: PoolInputs, *, used: list[PooledInput] | None = None,
                dice: float = 0.8, n_cases: int = 2000) -> bytes:
    """The aggregator's ``pooled.json`` for ``inputs`` (each input as given unless ``used``)."""
    return PooledRelease(
        pool_id=inputs.pool_id, benchmark_id=inputs.benchmark_id,
        metrics_version=inputs.metrics_version, model_id=inputs.model_id,
        model_digest=inputs.model_digest, inputs_digest=inputs.digest(),
        inputs=tuple(used if used is not None else [
            PooledInput(run_id=i.run_id, dataset_id=i.dataset.asset_id, commitment=i.commitment)
            for i in inputs.inputs]),
        n_cases=n_cases, aggregates=h.brats_aggregates(dice, n_cases)).to_bytes()


def pool_claims(pool: Pool, inputs: PoolInputs, release: bytes, *, image: str = AGGREGATOR,
                audience: str = POOL_AUDIENCE, nonce: str | None = None,
                env: dict[str, str] | None = None, recipient: str | None = None
                ) -> dict[str, Any]:
    """The aggregator's release token payload (Confidential Space-shaped, like a result's) for
    the sealed ``release``; ``recipient``: another key than the registry's it was sealed to."""
    recipient = recipient or pool.recipient_b64
    claims = pool.h.result_claims(summary={}, sealed_digest="sha256:" + "0" * 64,
                             benchmark_id=inputs.benchmark_id, data_digest="-",
                             model_digest=inputs.model_digest, image_digest=image)
    anchor = pool.anchor.model_copy(update={"recipient_key": recipient})
    spec = AggregateSpec.for_anchor(
        anchor, run_id=inputs.pool_id, benchmark_id=inputs.benchmark_id,
        metrics_version=str(inputs.metrics_version), model_digest=inputs.model_digest,
        inputs_uri=f"gs://authority-pools/{inputs.pool_id}/pool-authorization.json",
        inputs_digest=inputs.digest(), result_uri=f"gs://authority-pools/{inputs.pool_id}")
    claims["aud"] = audience
    claims["eat_nonce"] = nonce or pooled_nonce(release)
    claims["submods"]["container"]["env_override"] = {**spec.to_environ(), **(env or {})}
    return claims


def _dataset(client: TestClient, world: Any, h: Any, name: str, **budget: Any) -> int:
    did = h.ok(client.post(f"{API}/datasets", headers=world.data_owner.headers, json={
        "name": name, "digest": h.digest_of(name), "case_count": 5, **budget}), 201)["id"]
    bench = f"{API}/benchmarks/{world.benchmark_id}/datasets"
    h.ok(client.post(bench, json={"asset_id": did}, headers=world.data_owner.headers), 201)
    h.ok(client.post(f"{bench}/{did}/approve", headers=world.bench_owner.headers))
    return int(did)


def submit_result(client: TestClient, world: Any, h: Any, tokens: Any, dataset_id: int,
                  data_digest: str, run_id: str, commitment: str | None,
                  result_uri: str | None, n_cases: int = 5) -> Any:
    summary = {**h.brats_summary(0.5, n_cases), "run_id": run_id, "benchmark_id": str(
        world.benchmark_id)}
    if commitment is not None:
        summary["pool_statistics"] = commitment
    sealed = h.digest_of(f"sealed-{run_id}")
    token = tokens.sign(h.result_claims(
        summary=summary, sealed_digest=sealed, benchmark_id=world.benchmark_id,
        data_digest=data_digest, model_digest=world.model_digest))
    body = {"benchmark_id": world.benchmark_id, "dataset_id": dataset_id,
            "model_id": world.model_id, "summary": summary, "sealed_result_digest": sealed,
            "attestation_token": token}
    if result_uri is not None:
        body["result_uri"] = result_uri
    return client.post(f"{API}/results", json=body, headers=world.data_owner.headers)


def make_pool(client: TestClient, world: Any, h: Any, tokens: Any, database_url: str,
              site_cases: int = 5, **third_budget: Any) -> Pool:
    datasets = [int(world.dataset_id), _dataset(client, world, h, "hospital-b"),
                _dataset(client, world, h, "hospital-c", **third_budget)]
    digests = {datasets[0]: world.dataset_digest, datasets[1]: h.digest_of("hospital-b"),
               datasets[2]: h.digest_of("hospital-c")}
    pool_key = client.app.state.registry.pool_key  # type: ignore[attr-defined]
    db = open_database(database_url)
    try:
        with db.writer() as session:
            bench = session.get(Benchmark, world.benchmark_id)
            assert bench is not None
            bench.aggregator_image_digest = AGGREGATOR
            bench.pool_recipient_key = base64.b64encode(public_key_to_raw(
                pool_key.public_key())).decode()
            bench.pool_log_key = session.scalars(select(LogKey.verifier).where(
                LogKey.retired_at.is_(None))).one()
            bench.pool_witnesses, bench.pool_witness_quorum = [], 0
            session.commit()
    finally:
        db.dispose()
    runs, commitments = {}, {}
    for n, did in enumerate(datasets, start=1):
        h.ok(client.put(f"{API}/datasets/{did}/coordinates", headers=world.data_owner.headers,
                        json={"kms_key_name": "projects/hospital-tre/locations/europe-west4/"
                              f"keyRings/sealbench/cryptoKeys/dataset-{n}",
                              "storage_uri": f"gs://hospital-sealed/site-{n}",
                              "wip_provider": PROVIDER}))
        run, commitment = f"run-{n}", h.digest_of(f"statistics-{n}")
        h.ok(submit_result(client, world, h, tokens, did, digests[did], run, commitment,
                           f"gs://hospital-results/{run}", site_cases), 201)
        runs[did], commitments[run] = run, commitment
    return Pool(client, world, h, tokens, database_url, datasets, runs, commitments, pool_key)


@pytest.fixture
def pool(client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> Pool:
    return make_pool(client, world, h, tokens, database_url)


# -- results keep their location; the pool inputs ------------------------------------------------


def test_pool_inputs_list_each_accepted_result_with_its_coordinates_and_commitment(
        pool: Pool) -> None:
    inputs = pool.document()
    assert (inputs.benchmark_id, str(inputs.metrics_version), inputs.model_id,
            inputs.model_digest) == (str(pool.bid), PIN, str(pool.world.model_id),
                                     pool.world.model_digest)
    by_run = {i.run_id: i for i in inputs.inputs}
    assert set(by_run) == {"run-1", "run-2", "run-3"}
    second = by_run["run-2"]
    assert second.dataset.asset_id == str(pool.datasets[1])
    assert second.dataset.uri == "gs://hospital-sealed/site-2"
    assert second.dataset.kms_key.endswith("/cryptoKeys/dataset-2")
    assert second.dataset.pool_provider == PROVIDER
    assert second.data_digest == pool.h.digest_of("hospital-b")
    assert second.statistics_uri == "gs://hospital-results/run-2"
    assert second.commitment == pool.commitments["run-2"]
    # the stored result keeps its location
    result = pool.client.get(f"{API}/results", headers=pool.world.bench_owner.headers).json()
    assert {r["result_uri"] for r in result["items"]} == {
        f"gs://hospital-results/run-{n}" for n in (1, 2, 3)}


def test_pool_inputs_skip_results_without_statistics_and_refuse_others_than_the_authority(
        pool: Pool) -> None:
    h, w = pool.h, pool.world
    # a later result of dataset 2 that sealed no statistics does not displace run-2
    h.ok(submit_result(pool.client, w, h, pool.tokens, pool.datasets[1],
                       h.digest_of("hospital-b"), "run-2b", None, "gs://hospital-results/r"), 201)
    assert {i.run_id for i in pool.document().inputs} == {"run-1", "run-2", "run-3"}
    for actor in (w.data_owner, w.model_owner, w.other):
        assert pool.inputs(actor).status_code == 403


# -- the happy path -------------------------------------------------------------------------------


def test_authorizing_debits_each_dataset_once_on_the_log_before_any_draw(pool: Pool) -> None:
    inputs = pool.document()
    # the debits are on the log (and in each budget) before any aggregator ran
    debits = [d for d in pool.rows(PrivacyDebit) if d.pool_authorization_id is not None]
    assert sorted(d.dataset_id for d in debits) == sorted(pool.datasets)
    assert all(d.result_id is None and d.pooled_release_id is None
               and d.rho == pytest.approx(RHO) and d.epsilon == 1.0 and not d.exact
               for d in debits)
    assert sorted(d.seq for d in inputs.debits) == sorted(d.audit_seq for d in debits)
    actions = [e.action for e in pool.rows(AuditEvent)]
    assert actions.count("pool.authorize") == 1
    assert actions.index("pool.authorize") > max(
        i for i, a in enumerate(actions) if a == "privacy.debit")
    budget = pool.h.ok(pool.client.get(f"{API}/datasets/{pool.datasets[2]}/budget",
                                       headers=pool.world.data_owner.headers))
    assert [d["pool_authorization_id"] is not None for d in budget["debits"]] == [False, True]
    assert budget["spent_rho"] == pytest.approx(2 * RHO)

    release = release_of(pool, inputs)
    token = pool.tokens.sign(pool_claims(pool, inputs, release))
    created = pool.h.ok(pool.submit(inputs, release, token), 201)
    assert (created["n_sites"], created["n_cases"], created["image_digest"],
            created["pool_id"]) == (3, 2000, AGGREGATOR, inputs.pool_id)
    assert {i["run_id"]: i["commitment"] for i in created["inputs"]} == pool.commitments
    assert created["nonce"] == pooled_nonce(release)
    [row] = pool.rows(PooledReleaseRow)
    assert row.inputs_digest == inputs.digest()
    links = pool.rows(PooledInputRow)
    assert sorted(link.commitment for link in links) == sorted(pool.commitments.values())
    # submitting debits nothing more: the authorization paid
    assert len(pool.rows(PrivacyDebit)) == 6
    assert [e.action for e in pool.rows(AuditEvent)].count("pooled_release.submit") == 1
    # nothing new to pool: a second authorization over the same results is refused, unpaid
    again = pool.inputs()
    assert again.status_code == 409 and "nothing new to pool" in again.json()["message"]
    assert len(pool.rows(PrivacyDebit)) == 6
    # the authority and the model's owner read it; a hospital (board not published) does not
    for actor, seen in ((pool.world.bench_owner, 1), (pool.world.model_owner, 1),
                        (pool.world.data_owner, 0), (pool.world.other, 0)):
        listed = pool.h.ok(pool.client.get(f"{API}/benchmarks/{pool.bid}/pooled-releases",
                                           headers=actor.headers))
        assert len(listed) == seen
        if seen:
            assert listed[0]["tee_pooled"] is True
            assert listed[0]["attestation_token"] == token


# -- refusals ----------------------------------------------------------------------------------


def _nothing_stored(pool: Pool) -> None:
    assert pool.rows(PooledReleaseRow) == []
    assert pool.rows(PooledInputRow) == []
    # only the authorization's own debits, one per dataset (nothing debited twice)
    debits = [d.dataset_id for d in pool.rows(PrivacyDebit)
              if d.pool_authorization_id is not None or d.pooled_release_id is not None]
    assert len(debits) == len(set(debits))


def _refused(pool: Pool, response: Any, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["message"]
    for word in words:
        assert word in message, message
    _nothing_stored(pool)


def test_a_release_that_drops_a_site_is_refused(pool: Pool) -> None:
    inputs = pool.document()
    kept = [PooledInput(run_id=i.run_id, dataset_id=i.dataset.asset_id, commitment=i.commitment)
            for i in inputs.inputs if i.run_id != "run-2"]
    release = release_of(pool, inputs, used=kept)
    token = pool.tokens.sign(pool_claims(pool, inputs, release))
    _refused(pool, pool.submit(inputs, release, token), 409, "omits run run-2")


def test_inputs_the_registry_did_not_authorize_are_refused(pool: Pool) -> None:
    """The authority adds a fake site, or a stale commitment, to the authorized document: it
    is not what the registry signed (the aggregator would have refused it too)."""
    asked = pool.document()
    first = asked.inputs[0]
    fake = first.model_copy(update={
        "run_id": "run-fake", "dataset": first.dataset.model_copy(update={"asset_id": "999"}),
        "commitment": pool.h.digest_of("fake statistics")})
    stale = asked.model_copy(update={"inputs": tuple(
        i.model_copy(update={"commitment": pool.h.digest_of("earlier")})
        if i.run_id == "run-3" else i for i in asked.inputs)})
    for inputs in (asked.model_copy(update={"inputs": (*asked.inputs, fake)}), stale,
                   asked.model_copy(update={"pool_id": "pool-of-my-own"})):
        release = release_of(pool, inputs)
        token = pool.tokens.sign(pool_claims(pool, inputs, release))
        response = pool.submit(inputs, release, token)
        assert response.status_code == 422, response.text
        _nothing_stored(pool)
    # the fake run in the release only
    used = [PooledInput(run_id=i.run_id, dataset_id=i.dataset.asset_id, commitment=i.commitment)
            for i in asked.inputs] + [PooledInput(run_id="run-fake", dataset_id="999",
                                                  commitment=fake.commitment)]
    release = release_of(pool, asked, used=used)
    token = pool.tokens.sign(pool_claims(pool, asked, release))
    _refused(pool, pool.submit(asked, release, token), 409, "adds run run-fake")


def test_a_release_attested_by_another_image_is_refused(pool: Pool) -> None:
    inputs = pool.document()
    release = release_of(pool, inputs)
    for image in (pool.h.IMAGE_DIGEST, "sha256:" + "b" * 64):  # the evaluation's, an unknown
        token = pool.tokens.sign(pool_claims(pool, inputs, release, image=image))
        _refused(pool, pool.submit(inputs, release, token), 422, "pooled release attestation")


def test_a_release_token_of_another_audience_or_nonce_is_refused(pool: Pool) -> None:
    inputs = pool.document()
    release = release_of(pool, inputs)
    other = release_of(pool, inputs, dice=0.9)
    for claims in (
            pool_claims(pool, inputs, release, audience="sealbench-result"),
            # signed over other bytes (another noise draw): the nonce does not match these
            pool_claims(pool, inputs, release, nonce=pooled_nonce(other)),
            # an operator override the aggregate spec does not name
            pool_claims(pool, inputs, release,
                        env={"SEALBENCH_DATA_DIGEST": "sha256:" + "d" * 64}),
            # another inputs digest than the release's
            pool_claims(pool, inputs, release,
                        env={"SEALBENCH_POOL_INPUTS_DIGEST": "sha256:" + "e" * 64})):
        token = pool.tokens.sign(claims)
        _refused(pool, pool.submit(inputs, release, token), 422, "attestation was refused")


def test_the_authority_cannot_read_the_release_it_submits(pool: Pool) -> None:
    """The release is sealed to the registry's pool-release key: its plaintext (figure and
    noise) is nowhere in what the authority hands on, and only the registry's key opens it."""
    inputs = pool.document()
    plain = document_of(pool.h, inputs)
    sealed = pool.seal(plain, inputs)
    aggregates = PooledRelease.from_bytes(plain).aggregates
    # no member long enough to be recognised (a short one, "2000", may occur by chance)
    readable = [part for part in (canonical_json(v) for v in aggregates.values())
                if len(part) >= 16]
    assert readable and all(part not in sealed for part in [plain, *readable])
    with pytest.raises(CryptoError):
        open_sealed(sealed, X25519PrivateKey.generate(), pooled_release_info(
            inputs.pool_id, inputs.benchmark_id, AGGREGATOR))
    assert pool.opened(sealed, inputs) == PooledRelease.from_bytes(plain)


def test_a_release_sealed_to_another_key_than_the_registry_s_is_refused(pool: Pool) -> None:
    """An aggregator launched with the authority's own key as recipient would let the authority
    read every draw: its token names another recipient than the benchmark's pool recipient
    (which the sites' grants bind, so it got no key anyway), and the registry refuses it."""
    inputs = pool.document()
    own = X25519PrivateKey.generate()
    own_b64 = base64.b64encode(public_key_to_raw(own.public_key())).decode()
    sealed = seal(document_of(pool.h, inputs), own.public_key(), pooled_release_info(
        inputs.pool_id, inputs.benchmark_id, AGGREGATOR))
    token = pool.tokens.sign(pool_claims(pool, inputs, sealed, recipient=own_b64))
    _refused(pool, pool.submit(inputs, sealed, token), 422, "attestation was refused")


def test_a_release_sealed_for_another_pool_does_not_open(pool: Pool) -> None:
    """Sealed to the registry but bound to another pool (or image): the token may be genuine,
    the envelope does not open under this pool's info, and nothing is stored."""
    inputs = pool.document()
    sealed = seal(document_of(pool.h, inputs), pool.pool_key.public_key(), pooled_release_info(
        "pool-other", inputs.benchmark_id, AGGREGATOR))
    token = pool.tokens.sign(pool_claims(pool, inputs, sealed))
    _refused(pool, pool.submit(inputs, sealed, token), 422, "does not open")


def test_a_replayed_release_is_refused(pool: Pool) -> None:
    """The same release again, or a relaunch's (another token over the same authorization):
    one authorization publishes one release, debited once."""
    inputs = pool.document()
    release = release_of(pool, inputs)
    token = pool.tokens.sign(pool_claims(pool, inputs, release))
    pool.h.ok(pool.submit(inputs, release, token), 201)
    again = pool.submit(inputs, release, token)
    assert again.status_code == 409, again.text
    assert "already produced pooled release" in again.json()["message"]
    relaunched = release_of(pool, inputs)  # sealed again: other bytes, another nonce
    again = pool.submit(inputs, relaunched, pool.tokens.sign(
        pool_claims(pool, inputs, relaunched)))
    assert again.status_code == 409, again.text
    assert len(pool.rows(PooledReleaseRow)) == 1
    assert len([d for d in pool.rows(PrivacyDebit)
                if d.pool_authorization_id is not None]) == 3


def test_asking_again_before_any_release_answers_the_same_authorization_unpaid(
        pool: Pool) -> None:
    """Its aggregator failed: the same pool asked again is that authorization (200, reused),
    debited once; after a site's new result, a new one (a new debit)."""
    first = pool.h.ok(pool.inputs(), 201)
    debits = len(pool.rows(PrivacyDebit))
    again = pool.inputs()
    assert again.status_code == 200, again.text
    assert again.json()["reused"] is True and again.json()["pool_id"] == first["pool_id"]
    assert len(pool.rows(PrivacyDebit)) == debits
    h, w = pool.h, pool.world
    h.ok(submit_result(pool.client, w, h, pool.tokens, pool.datasets[0], w.dataset_digest,
                       "run-1b", h.digest_of("statistics-1b"), "gs://hospital-results/run-1b"),
         201)
    fresh = h.ok(pool.inputs(), 201)
    assert fresh["pool_id"] != first["pool_id"] and not fresh["reused"]
    assert len(pool.rows(PrivacyDebit)) == debits + 1 + 3  # the new result's, then the pool's


def test_a_withdrawn_dataset_is_refused_at_authorization_and_at_submit(pool: Pool) -> None:
    """The attack of issue 40: a hospital withdraws its dataset; an authorization afterwards
    leaves it out, and a release authorized before is not published."""
    h, w = pool.h, pool.world
    inputs = pool.document()  # authorized over all three sites
    withdrawn = pool.datasets[1]
    h.ok(pool.client.post(f"{API}/benchmarks/{pool.bid}/datasets/{withdrawn}/withdraw",
                          headers=w.data_owner.headers))
    release = release_of(pool, inputs)
    token = pool.tokens.sign(pool_claims(pool, inputs, release))
    _refused(pool, pool.submit(inputs, release, token), 409, f"dataset {withdrawn}",
             "no longer approved")
    # the next authorization leaves it out and says why; its debit is only on the others
    body = h.ok(pool.inputs(), 201)
    assert withdrawn not in body["datasets"] and len(body["datasets"]) == 2
    [reason] = [lo["reason"] for lo in body["left_out"] if lo["dataset_id"] == withdrawn]
    assert "not approved" in reason
    assert all(withdrawn not in d["datasets"] for d in body["debits"])


def test_a_one_site_pool_is_refused_and_debits_nothing(pool: Pool) -> None:
    h, w = pool.h, pool.world
    for did in pool.datasets[1:]:
        h.ok(pool.client.post(f"{API}/benchmarks/{pool.bid}/datasets/{did}/withdraw",
                              headers=w.data_owner.headers))
    before = len(pool.rows(PrivacyDebit))
    response = pool.inputs()
    assert response.status_code == 409, response.text
    assert "at least 2 sites" in response.json()["message"]
    assert len(pool.rows(PrivacyDebit)) == before
    assert "pool.authorize" not in [e.action for e in pool.rows(AuditEvent)]


def test_a_withdrawn_model_is_refused_at_authorization(pool: Pool) -> None:
    h, w = pool.h, pool.world
    h.ok(pool.client.post(f"{API}/benchmarks/{pool.bid}/models/{w.model_id}/withdraw",
                          headers=w.model_owner.headers))
    response = pool.inputs()
    assert response.status_code == 409, response.text
    assert "not approved" in response.json()["message"]
    assert "pool.authorize" not in [e.action for e in pool.rows(AuditEvent)]


def test_only_the_authority_authorizes_and_reads_authorizations(pool: Pool) -> None:
    body = pool.h.ok(pool.inputs(), 201)
    for actor in (pool.world.data_owner, pool.world.model_owner, pool.world.other):
        assert pool.inputs(actor).status_code == 403
        assert pool.client.get(
            f"{API}/benchmarks/{pool.bid}/pool-authorizations/{body['pool_id']}",
            headers=actor.headers).status_code == 403
    assert [d.dataset_id for d in pool.rows(PrivacyDebit)
            if d.pool_authorization_id is not None] == sorted(pool.datasets)


def test_budget_agrees_with_the_log(pool: Pool) -> None:
    """Every debit of a dataset's budget is a logged ``privacy.debit`` event whose payload
    states the same rho and the ledger's spend after it."""
    import json

    pool.document()
    events = {e.seq: e for e in pool.rows(AuditEvent)}
    for did in pool.datasets:
        budget = pool.h.ok(pool.client.get(f"{API}/datasets/{did}/budget",
                                           headers=pool.world.data_owner.headers))
        spent = 0.0
        for debit in budget["debits"]:
            payload = json.loads(events[debit["audit_seq"]].payload)
            assert events[debit["audit_seq"]].action == "privacy.debit"
            assert payload["rho"] == pytest.approx(debit["rho"])
            spent += debit["rho"]
            assert payload["spent_rho"] == pytest.approx(spent)
        assert budget["spent_rho"] == pytest.approx(spent)


def test_aggregates_the_plugin_refuses_are_refused(pool: Pool) -> None:
    inputs = pool.document()
    doc = PooledRelease.from_bytes(document_of(pool.h, inputs))
    bad = pool.seal(doc.model_copy(update={"aggregates": {"n_cases": 2000}}).to_bytes(), inputs)
    token = pool.tokens.sign(pool_claims(pool, inputs, bad))
    _refused(pool, pool.submit(inputs, bad, token), 422, "aggregates")
    # aggregates of another case count than the release states
    bad = pool.seal(doc.model_copy(update={"n_cases": 1999}).to_bytes(), inputs)
    token = pool.tokens.sign(pool_claims(pool, inputs, bad))
    _refused(pool, pool.submit(inputs, bad, token), 422, "states 1999 cases")


def test_a_dataset_that_cannot_pay_is_left_out_of_the_authorization(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    # the third dataset's budget pays exactly two releases: its own result's and one more
    pool = make_pool(client, world, h, tokens, database_url,
                     budget_epsilon=epsilon_of(2 * RHO, 1e-6) * (1 + 1e-12),
                     budget_delta=1e-6)
    third = pool.datasets[2]
    # the third hospital submits a second result, spending what was left
    h.ok(submit_result(client, world, h, tokens, third, h.digest_of("hospital-c"), "run-3b",
                       h.digest_of("statistics-3b"), "gs://hospital-results/run-3b"), 201)
    body = h.ok(pool.inputs(), 201)
    assert sorted(body["datasets"]) == sorted(pool.datasets[:2])
    reasons = {lo["run_id"]: lo["reason"] for lo in body["left_out"]}
    assert "privacy budget" in reasons["run-3b"]
    assert not [d for d in pool.rows(PrivacyDebit)
                if d.pool_authorization_id is not None and d.dataset_id == third]


# -- the leaderboard ---------------------------------------------------------------------------


def _board(pool: Pool, actor: Any) -> Any:
    return pool.h.ok(pool.client.get(f"{API}/benchmarks/{pool.bid}/leaderboard/pooled",
                                     headers=actor.headers))


def test_the_leaderboard_marks_the_tee_pooled_figure(pool: Pool) -> None:
    before = _board(pool, pool.world.bench_owner)
    [standing] = before["standings"]
    assert standing["tee_pooled"] is None
    assert standing["values"][0]["tee_pooled"] is False
    inputs = pool.document()
    release = release_of(pool, inputs, dice=0.8, n_cases=2000)
    created = pool.h.ok(pool.submit(inputs, release, pool.tokens.sign(
        pool_claims(pool, inputs, release))), 201)
    for actor in (pool.world.bench_owner, pool.world.model_owner):
        [standing] = _board(pool, actor)["standings"]
        mark = standing["tee_pooled"]
        assert (mark["tee_pooled"], mark["pooled_release_id"], mark["n_sites"],
                mark["n_cases"]) == (True, created["id"], 3, 2000)
        assert mark["pooled_at"] == created["created_at"]
        assert mark["aggregates"] == pool.opened(release, inputs).aggregates
        value = standing["values"][0]
        assert (value["tee_pooled"], value["pooled_release_id"], value["n_sites"]) == (
            True, created["id"], 3)
        # the release's figure (0.8 over 2,000 cases), not the pool of the sites' 0.5
        assert value["pooled"] == pytest.approx(0.8, abs=1e-9)
        assert len(value["sites"]) == 3  # the sites' own releases stay listed
    # a hospital sees the pool of its own results only, never the TEE-pooled figure
    [own] = _board(pool, pool.world.data_owner)["standings"]
    assert own["tee_pooled"] is None
    assert _board(pool, pool.world.other)["standings"] == []


# -- the client's side -------------------------------------------------------------------------


def test_the_client_pools_through_the_registry_api(pool: Pool) -> None:
    from sealbench.client.registry.api import RegistryClient

    registry = RegistryClient(pool.client, pool.world.bench_owner.token)
    authorized = registry.authorize_pool(pool.bid, pool.world.model_id)
    assert authorized.left_out == () and len(authorized.debits) == 3
    authorization = registry.pool_authorization(pool.bid, authorized.pool_id)
    verify_authorization(authorization, pool.anchor)
    inputs = authorization.inputs
    assert {i.run_id for i in inputs.inputs} == {"run-1", "run-2", "run-3"}
    assert [a.pool_id for a in registry.pool_authorizations(pool.bid, pool.world.model_id)] \
        == [inputs.pool_id]
    release = release_of(pool, inputs)
    accepted = registry.submit_pooled_release(
        pool.bid, sealed=release, token=pool.tokens.sign(pool_claims(pool, inputs, release)),
        inputs=inputs)
    assert (accepted.n_sites, accepted.pool_id) == (3, inputs.pool_id)
    [listed] = registry.pool_authorizations(pool.bid, pool.world.model_id)
    assert listed.released_id == accepted.id


def test_a_submitted_result_carries_its_run_specs_result_location() -> None:
    """``result submit`` sends where the run left its objects: the run spec's location, also
    after ``result fetch`` copied them here (the record's ``result_uri`` then names the copy)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace
    from typing import cast

    from sealbench.client.runs.records import RunRecord
    from sealbench.client.runs.result_open import OpenedResult
    from sealbench.client.runs.submit import result_submission

    opened = cast(OpenedResult, SimpleNamespace(
        summary_json={"format": "sealbench/result-summary"},
        sealed_result_sha256="sha256:" + "5" * 64, token="header.payload.signature"))
    record = RunRecord(run_id="run-1", benchmark_id=1, dataset_id=2, model_id=3,
                       tee="confidential-space", image_digest="sha256:" + "1" * 64,
                       result_uri="gs://hospital-results/run-1", status="succeeded",
                       started_at=datetime(2026, 6, 1, tzinfo=UTC))
    assert result_submission(record, opened).result_uri == "gs://hospital-results/run-1"
    fetched = record.model_copy(update={"result_uri": "file:///home/h/results/run-1",
                                        "spec_result_uri": "gs://hospital-results/run-1"})
    assert result_submission(fetched, opened).result_uri == "gs://hospital-results/run-1"
    local = record.model_copy(update={"result_uri": "file:///home/h/results/run-1"})
    assert result_submission(local, opened).result_uri == "file:///home/h/results/run-1"


def test_sites_too_small_to_publish_alone_stand_on_the_board_through_the_tee(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """Every site below the small-cell minimum: without a pooled release the model is not on
    the board (all withheld); with one it stands, by the release's figure, on the API and on the
    dashboard's page."""
    import re

    pool = make_pool(client, world, h, tokens, database_url, site_cases=3)
    before = _board(pool, world.bench_owner)
    assert before["standings"] == [] and len(before["withheld"]) == 3
    inputs = pool.document()  # withheld results are pooled: that is what pooling is for
    assert len(inputs.inputs) == 3
    release = release_of(pool, inputs)
    created = h.ok(pool.submit(inputs, release, tokens.sign(pool_claims(pool, inputs, release))),
                   201)
    [standing] = _board(pool, world.bench_owner)["standings"]
    assert standing["tee_pooled"]["pooled_release_id"] == created["id"]
    assert (standing["model_id"], standing["model_name"], standing["rank"]) == (
        world.model_id, "unet", 1)
    value = standing["values"][0]
    assert (value["tee_pooled"], value["n_sites"], value["sites"]) == (True, 3, [])
    assert value["pooled"] == pytest.approx(0.8, abs=1e-9)
    # the dashboard's page draws it
    client.cookies.clear()
    form = client.get("/ui/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    client.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": world.bench_owner.token,
                                     "next": "/ui/"}, follow_redirects=False)
    page = client.get(f"/ui/benchmarks/{world.benchmark_id}/leaderboard")
    assert page.status_code == 200, page.text
    assert "unet" in page.text
    pooled_page = client.get(f"/ui/benchmarks/{world.benchmark_id}/pooled")
    assert pooled_page.status_code == 200, pooled_page.text
    badge = re.search(rf'<a class="badge badge-tee" id="tee-pooled-{world.model_id}"[^>]*'
                      rf'title="([^"]*)">TEE-pooled</a>', pooled_page.text)
    assert badge is not None, pooled_page.text
    assert f"release #{created['id']}" in badge.group(1) and "3 sites" in badge.group(1)
    # the badge links the release's own page, which shows its attestation as a result's does
    href = f"/ui/benchmarks/{world.benchmark_id}/pooled-releases/{created['id']}"
    assert f'href="{href}"' in pooled_page.text
    page = client.get(href)
    assert page.status_code == 200, page.text
    assert created["nonce"] in page.text and AGGREGATOR in page.text
    assert "the benchmark's aggregator</span>" in page.text  # the image matches
    assert "mock TEE, not a confidential run" in page.text  # the test issuer is no hardware's
    for n in (1, 2, 3):  # every site it pooled, with its commitment
        assert f"<code>run-{n}</code>" in page.text
        assert pool.commitments[f"run-{n}"][:19] in page.text
    assert "sha256:" + hashlib.sha256(release).hexdigest() in page.text  # the sealed release
    assert ">0.8" in page.text  # its figure, not the sites' own releases' 0.5
    # another release id: not found; a hospital (the board is not published) sees none
    assert client.get(f"/ui/benchmarks/{world.benchmark_id}/pooled-releases/999").status_code \
        == 404
    client.cookies.clear()
    form = client.get("/ui/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    client.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": world.data_owner.token,
                                     "next": "/ui/"}, follow_redirects=False)
    assert client.get(href).status_code == 404


def test_a_witnessed_benchmark_hands_out_an_authorization_only_once_its_witnesses_cosigned(
        client: TestClient, world: Any, h: Any, tokens: Any, database_url: str) -> None:
    """A benchmark that names a witness: the registry answers the authorization's evidence
    only with a checkpoint the witness cosigned after the authorization was logged (409 before,
    nothing more debited); the aggregator's check then holds against the anchor, and fails
    without the cosignature."""
    from sealbench.crypto.note import ALG_COSIGNATURE, Checkpoint, SignerKey, cosign

    pool = make_pool(client, world, h, tokens, database_url)
    witness = SignerKey.generate("witness.example/hospital-a", alg=ALG_COSIGNATURE)
    db = open_database(database_url)
    try:
        with db.writer() as session:
            bench = session.get(Benchmark, world.benchmark_id)
            assert bench is not None
            bench.pool_witnesses = [witness.verifier().to_string()]
            bench.pool_witness_quorum = 1
            session.commit()
    finally:
        db.dispose()
    authorized = h.ok(pool.inputs(), 201)
    url = f"{API}/benchmarks/{pool.bid}/pool-authorizations/{authorized['pool_id']}"
    early = client.get(url, headers=world.bench_owner.headers)
    assert early.status_code == 409 and "cosigned" in early.json()["message"], early.text
    debits = len(pool.rows(PrivacyDebit))
    # the witness cosigns the current checkpoint (which holds the authorization)
    checkpoint = h.ok(client.get(f"{API}/audit/checkpoint", headers=world.other.headers))
    size = checkpoint["tree_size"]
    cp = Checkpoint(checkpoint["origin"], size, base64.b64decode(checkpoint["root"]))
    line = cosign(cp, witness, 1_765_000_000).line().rstrip("\n")
    h.ok(client.post(f"{API}/audit/cosignatures", headers=world.other.headers, json={
        "witness": witness.verifier().to_string(), "tree_size": size, "signature": line}), 201)
    authorization = PoolAuthorization.model_validate(h.ok(client.get(
        url, headers=world.bench_owner.headers)))
    verify_authorization(authorization, pool.anchor)
    assert pool.anchor.quorum == 1
    # the same evidence stripped of the cosignature: the aggregator refuses it
    from sealbench.contract.pool_authorization import AuthorizationError
    from sealbench.crypto.note import Note

    note = Note.parse(authorization.checkpoint.encode())
    bare = Note(note.text, note.signatures[:1]).to_bytes().decode()
    with pytest.raises(AuthorizationError, match="witness cosignatures"):
        verify_authorization(authorization.model_copy(update={"checkpoint": bare}), pool.anchor)
    assert len(pool.rows(PrivacyDebit)) == debits

