"""Which workloads an owner's key is granted to, computed from the real registry's approvals:
only approved pairs, the right digests, the data field left open for model owners."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sealbench.client.assets.grants import allowed_workloads
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.errors import ConfigError
from sealbench.client.registry.api import RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate

RECIPIENT = sha256_digest(b"hospital result key")


def _world(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> tuple[int, int, int, int, int]:
    b = api["authority"].create_benchmark(benchmark_body()).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"data"), case_count=1,
        statistics={RECIPIENT_STATISTIC: RECIPIENT},
    )).id
    approved = api["modelco"].register_model(
        ModelCreate(name="good", version="1", digest=sha256_digest(b"good"))).id
    pending = api["modelco"].register_model(
        ModelCreate(name="pending", version="1", digest=sha256_digest(b"pending"))).id
    rejected = api["modelco"].register_model(
        ModelCreate(name="rejected", version="1", digest=sha256_digest(b"rejected"))).id
    api["hospital"].request_association("dataset", b, d)
    for m in (approved, pending, rejected):
        api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("dataset", b, d, approve=True)
    api["authority"].decide_association("model", b, approved, approve=True)
    api["authority"].decide_association("model", b, rejected, approve=False)
    return b, d, approved, pending, rejected


def test_unapproved_models_get_no_grant_on_the_dataset_key(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> None:
    b, d, approved, _, _ = _world(api, benchmark_body)
    grants = allowed_workloads(api["hospital"], "dataset", d)
    assert [(g.benchmark_id, g.dataset_id, g.model_id) for g in grants] == [(b, d, approved)]
    identity = grants[0].identity
    assert identity.data_digest == sha256_digest(b"data")
    assert identity.model_digest == sha256_digest(b"good")
    assert identity.recipient_digest == RECIPIENT
    assert identity.image_digest == api["hospital"].get_benchmark(b).image_digest


def test_model_owner_grant_leaves_the_dataset_open_but_binds_the_recipient(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> None:
    _, d, approved, pending, _ = _world(api, benchmark_body)
    grants = allowed_workloads(api["modelco"], "model", approved)
    assert len(grants) == 1 and grants[0].dataset_id == d
    assert grants[0].identity.data_digest is None
    assert grants[0].identity.recipient_digest == RECIPIENT
    assert allowed_workloads(api["modelco"], "model", pending) == ()


def test_dataset_without_recipient_cannot_be_granted(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> None:
    b = api["authority"].create_benchmark(benchmark_body("other")).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(
        DatasetCreate(name="nokey", digest=sha256_digest(b"x"), case_count=1)).id
    m = api["modelco"].register_model(
        ModelCreate(name="m", version="1", digest=sha256_digest(b"m"))).id
    api["hospital"].request_association("dataset", b, d)
    api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("dataset", b, d, approve=True)
    api["authority"].decide_association("model", b, m, approve=True)
    with pytest.raises(ConfigError) as info:
        allowed_workloads(api["modelco"], "model", m)
    assert "keys init" in info.value.hint
