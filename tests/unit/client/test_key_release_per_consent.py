"""Key release is per consent (issue 28): an owner's grants, computed by ``policy sync`` from the
registry's approvals, release its key only for the exact (asset, benchmark, image, plug-in pin,
EXPERIMENTAL yes/no) it approved. Each attack below is a token the operator could obtain by
launching the approved image with other attested overrides or on the GPU preview image; it is
judged as Google (and the mock's STS, the same code) judges it: the provider's condition holds
and the uid it maps is granted. The registry, the approvals and the grants are real; the tokens
are the verifier's claims with the operator's choices."""

from __future__ import annotations

import copy
from typing import Any

from sealbench.client.assets.grants import AllowedWorkload, allowed_workloads
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.images import pinned
from sealbench.client.registry import definitions
from sealbench.client.registry.api import RegistryClient
from sealbench.contract.pin import BenchmarkPin
from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.confidential_space import uid_mapping_expression
from sealbench.gcp.policy import AssetPolicy, PoolProvider, attribute_condition, condition_context
from sealbench.mocktee.cel import evaluate_bool, evaluate_string
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate

POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
KEY = "projects/h/locations/global/keyRings/r/cryptoKeys/k"
IMAGE = sha256_digest(b"one evaluation image, two benchmarks")
RECIPIENT = sha256_digest(b"key")


def _benchmark(api: dict[str, RegistryClient], name: str, *, pin_variant: str = "",
               accept_experimental: bool = False) -> int:
    definition = definitions.load_benchmark_definition("brats-small")
    body: BenchmarkCreate = definitions.benchmark_body(
        definition, image=pinned.EvaluationImage(f"r/eval@{IMAGE}", IMAGE),
        reference_model_id=None, accept_experimental=accept_experimental)
    pin = body.metrics_version
    body = body.model_copy(update={
        "name": name, "metrics_version": BenchmarkPin(pin.name, pin.version + pin_variant)})
    b = api["authority"].create_benchmark(body).id
    api["admin"].approve_benchmark(b)
    return b


def _dataset(api: dict[str, RegistryClient], name: str) -> int:
    return api["hospital"].register_dataset(DatasetCreate(
        name=name, digest=sha256_digest(name.encode()), case_count=1,
        statistics={RECIPIENT_STATISTIC: RECIPIENT})).id


def _join(api: dict[str, RegistryClient], b: int, d: int, m: int, *, exact: bool = False) -> None:
    api["hospital"].request_association("dataset", b, d, exact_release_consent=exact)
    api["authority"].decide_association("dataset", b, d, approve=True)
    if m not in {a.asset_id for a in api["authority"].list_associations("model", b, "approved")}:
        api["modelco"].request_association("model", b, m)
        api["authority"].decide_association("model", b, m, approve=True)


def _policy(grants: tuple[AllowedWorkload, ...]) -> AssetPolicy:
    """What ``sealbench policy sync`` writes for the hospital's pool (client/assets/owner.py)."""
    return AssetPolicy(
        provider=POOL, key_name=KEY, bucket=None,
        workloads=frozenset(g.identity for g in grants), include_data=True,
        experimental_gpu_images=frozenset(
            g.identity.image_digest for g in grants if g.accept_experimental),
        experimental_benchmark_ids=frozenset(
            str(g.benchmark_id) for g in grants if g.accept_experimental))


def _token(run: WorkloadIdentity, *, gpu: bool = False) -> dict[str, Any]:
    """The claims of a launch of ``run`` on production hardware (the GPU preview image with
    confidential computing ON when ``gpu``)."""
    return {
        "swname": "CONFIDENTIAL_SPACE", "dbgstat": "disabled-since-boot",
        "hwmodel": "GCP_INTEL_TDX", "secboot": True,
        "submods": {
            "confidential_space": {
                "support_attributes": ["EXPERIMENTAL"] if gpu else ["LATEST", "STABLE", "USABLE"]},
            "container": {"image_digest": run.image_digest, "cmd_override": None,
                          "env_override": run.env_overrides()},
            **({"nvidia_gpu": {"cc_mode": "ON"}} if gpu else {}),
        },
    }


def _released(policy: AssetPolicy, claims: dict[str, Any]) -> bool:
    activation = {"assertion": copy.deepcopy(claims)}
    if not evaluate_bool(attribute_condition(condition_context(policy)), activation):
        return False
    uid = evaluate_string(uid_mapping_expression(include_data=True), activation)
    return uid in policy.uids()


def _run(d: int, m: int, b: int, pin: str, api: dict[str, RegistryClient]) -> WorkloadIdentity:
    return WorkloadIdentity(
        IMAGE, api["hospital"].get_dataset(d).digest,  # type: ignore[arg-type]
        api["hospital"].get_model(m).digest, RECIPIENT, str(b), pin)  # type: ignore[arg-type]


def _world(api: dict[str, RegistryClient]) -> dict[str, int]:
    """Benchmarks 'plain' (STABLE only), 'gpu' (accepts EXPERIMENTAL) and 'exact' (its pin ends
    in -exact), all on one image; dataset d1 joins plain and gpu, d3 only plain, d4 exact."""
    ids = {"plain": _benchmark(api, "plain"), "gpu": _benchmark(api, "gpu",
                                                                  accept_experimental=True),
           "exact": _benchmark(api, "exact", pin_variant="-exact")}
    ids["m"] = api["modelco"].register_model(
        ModelCreate(name="unet", version="1", digest=sha256_digest(b"unet"))).id
    for name in ("d1", "d3", "d4"):
        ids[name] = _dataset(api, name)
    _join(api, ids["plain"], ids["d1"], ids["m"])
    _join(api, ids["gpu"], ids["d1"], ids["m"])
    _join(api, ids["plain"], ids["d3"], ids["m"])
    _join(api, ids["exact"], ids["d4"], ids["m"], exact=True)
    return ids


def _grants(api: dict[str, RegistryClient], ids: dict[str, int]) -> AssetPolicy:
    """The hospital's pool is shared by its datasets: one policy for all of them."""
    return _policy(tuple(g for d in ("d1", "d3", "d4")
                         for g in allowed_workloads(api["hospital"], "dataset", ids[d])))


def _pin(api: dict[str, RegistryClient], b: int) -> str:
    """The benchmark's pin as the uid carries it (text)."""
    return str(api["hospital"].get_benchmark(b).metrics_version)


def test_approved_runs_are_released(api: dict[str, RegistryClient]) -> None:
    ids = _world(api)
    policy = _grants(api, ids)
    for b, d in (("plain", "d1"), ("gpu", "d1"), ("plain", "d3"), ("exact", "d4")):
        run = _run(ids[d], ids["m"], ids[b], _pin(api, ids[b]), api)
        assert _released(policy, _token(run)), (b, d)
    gpu = _run(ids["d1"], ids["m"], ids["gpu"], _pin(api, ids["gpu"]), api)
    assert _released(policy, _token(gpu, gpu=True))  # the opted-in benchmark's allowance


def test_experimental_token_for_a_benchmark_that_never_opted_in_denied_key(
    api: dict[str, RegistryClient]
) -> None:
    """Same image, same dataset and model; the run names the plain benchmark, which never
    accepted GPU preview images (the leak of issue 28: d1 joined 'gpu' too)."""
    ids = _world(api)
    run = _run(ids["d1"], ids["m"], ids["plain"], _pin(api, ids["plain"]), api)
    assert _released(_grants(api, ids), _token(run))
    assert not _released(_grants(api, ids), _token(run, gpu=True))


def test_experimental_token_for_an_asset_never_in_an_opted_in_benchmark_denied_key(
    api: dict[str, RegistryClient]
) -> None:
    """d3 shares the hospital's pool with d1 (which joined 'gpu') but never joined 'gpu'."""
    ids = _world(api)
    policy = _grants(api, ids)
    for b in ("gpu", "plain"):
        run = _run(ids["d3"], ids["m"], ids[b], _pin(api, ids[b]), api)
        assert not _released(policy, _token(run, gpu=True)), b
    assert not _released(policy, _token(
        _run(ids["d3"], ids["m"], ids["gpu"], _pin(api, ids["gpu"]), api)))


def test_run_pinned_to_another_benchmarks_version_denied_key(
    api: dict[str, RegistryClient]
) -> None:
    """d1's plain-benchmark run, pinned to the exact-release pin the pool also grants (for d4):
    no key, so no exact figures of d1 are ever computed without its owner's consent."""
    ids = _world(api)
    policy = _grants(api, ids)
    exact_pin = _pin(api, ids["exact"])
    assert exact_pin.endswith("-exact")
    for b in ("plain", "gpu", "exact"):
        run = _run(ids["d1"], ids["m"], ids[b], exact_pin, api)
        assert not _released(policy, _token(run)), b
    other = _run(ids["d4"], ids["m"], ids["plain"], _pin(api, ids["plain"]), api)
    assert not _released(policy, _token(other))  # d4 never joined plain


def test_condition_does_not_grow_with_the_benchmarks_an_asset_joins(
    api: dict[str, RegistryClient]
) -> None:
    """The pins and benchmarks are uid fields (one binding per approval), so the condition's
    size is that of its images and EXPERIMENTAL benchmarks, far below Google's 4,096
    characters; the measured sizes are in docs/architecture.md."""
    ids = _world(api)
    size = len(attribute_condition(condition_context(_grants(api, ids))))
    for n in range(4):
        b = _benchmark(api, f"more-{n}")
        _join(api, b, ids["d1"], ids["m"])
    assert len(attribute_condition(condition_context(_grants(api, ids)))) == size < 4096
