"""What withdrawing an association does on the client side, against the real registry (and, for
the key policy, the in-process mock cloud): the next ``policy sync`` revokes the workloads of
the withdrawn pair, and a run of the pair is refused with a message that says it was withdrawn."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sealbench.client.assets import owner
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.errors import NotAllowedError
from sealbench.client.registry.api import RegistryClient
from sealbench.client.runs.spec import approved_models
from sealbench.crypto.digest import sha256_digest
from sealbench.mocktee.owner_cloud import InsecureMockOwnerCloud
from sealbench.mocktee.server import MockCloud
from sealbench.server.schemas import (
    BenchmarkCreate,
    CoordinatesUpdate,
    DatasetCreate,
    ModelCreate,
)

RECIPIENT = sha256_digest(b"hospital result key")


def _approved_pair(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> tuple[int, int, int]:
    b = api["authority"].create_benchmark(benchmark_body()).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name="d", digest=sha256_digest(b"data"), case_count=1,
        statistics={RECIPIENT_STATISTIC: RECIPIENT},
    )).id
    m = api["modelco"].register_model(
        ModelCreate(name="m", version="1", digest=sha256_digest(b"weights"))).id
    api["hospital"].request_association("dataset", b, d)
    api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("dataset", b, d, approve=True)
    api["authority"].decide_association("model", b, m, approve=True)
    return b, d, m


def test_policy_sync_revokes_the_grant_of_a_withdrawn_model(
    api: dict[str, RegistryClient],
    benchmark_body: Callable[..., BenchmarkCreate],
    tmp_path: Path,
) -> None:
    b, d, m = _approved_pair(api, benchmark_body)
    with MockCloud(tmp_path / "mock") as _cloud:
        cloud = InsecureMockOwnerCloud.connect(tmp_path / "mock", "modelco@test.example")
        api["modelco"].put_coordinates("model", m, CoordinatesUpdate.model_validate(
            cloud.default_coordinates("model", m), from_attributes=True))
        first = owner.sync_policy(api["modelco"], cloud, "model", m)
        assert [(g.benchmark_id, g.dataset_id, g.model_id) for g in first.grants] == [(b, d, m)]
        granted = first.grants[0].identity.uid()
        # members are principal sets whose attribute is the workload's uid
        assert [m.endswith(granted) for m in first.report.key.added] == [True]
        api["modelco"].withdraw_association("model", b, m)
        second = owner.sync_policy(api["modelco"], cloud, "model", m)
    assert second.grants == ()
    assert [m.endswith(granted) for m in second.report.key.removed] == [True]
    assert second.report.key.added == ()


def test_run_of_a_withdrawn_dataset_is_refused_saying_so(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> None:
    b, d, m = _approved_pair(api, benchmark_body)
    assert approved_models(api["hospital"], b, d, m) == (m,)
    api["hospital"].withdraw_association("dataset", b, d)
    with pytest.raises(NotAllowedError) as info:
        approved_models(api["hospital"], b, d, m)
    assert f"dataset {d} was withdrawn from benchmark {b}" in str(info.value)
    assert "ask to join again" in str(info.value.hint)


def test_run_with_a_withdrawn_model_is_refused_saying_so(
    api: dict[str, RegistryClient], benchmark_body: Callable[..., BenchmarkCreate]
) -> None:
    b, d, m = _approved_pair(api, benchmark_body)
    api["modelco"].withdraw_association("model", b, m)
    with pytest.raises(NotAllowedError) as info:
        approved_models(api["hospital"], b, d, m)
    assert f"model {m} was withdrawn from benchmark {b} by its owner" in str(info.value)
    with pytest.raises(NotAllowedError, match="no model is approved"):
        approved_models(api["hospital"], b, d, None)
