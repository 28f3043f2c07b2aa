"""A benchmark's opt-in to confidential-GPU preview images (issue 18) travels from the registry
to the key owners' conditions, for that benchmark's image only; without it nothing changes."""

from __future__ import annotations

from sealbench.client.assets.grants import AllowedWorkload, allowed_workloads
from sealbench.client.assets.prepare import RECIPIENT_STATISTIC
from sealbench.client.images import pinned
from sealbench.client.registry import definitions
from sealbench.client.registry.api import RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.gcp.policy import AssetPolicy, PoolProvider, attribute_condition, condition_context
from sealbench.server.schemas import BenchmarkCreate, DatasetCreate, ModelCreate

POOL = PoolProvider("200000000002", "hospital-pool", "attestation")
KEY = "projects/h/locations/global/keyRings/r/cryptoKeys/k"


def _grants_of(
    api: dict[str, RegistryClient], body: BenchmarkCreate, name: str
) -> list[AllowedWorkload]:
    b = api["authority"].create_benchmark(body).id
    api["admin"].approve_benchmark(b)
    d = api["hospital"].register_dataset(DatasetCreate(
        name=name, digest=sha256_digest(name.encode()), case_count=1,
        statistics={RECIPIENT_STATISTIC: sha256_digest(b"key")})).id
    m = api["modelco"].register_model(
        ModelCreate(name=f"m-{name}", version="1", digest=sha256_digest(b"m" + name.encode()))).id
    api["hospital"].request_association("dataset", b, d)
    api["modelco"].request_association("model", b, m)
    api["authority"].decide_association("dataset", b, d, approve=True)
    api["authority"].decide_association("model", b, m, approve=True)
    assert api["hospital"].get_benchmark(b).accept_experimental is body.accept_experimental
    return list(allowed_workloads(api["hospital"], "dataset", d))


def test_opt_in_reaches_the_condition_for_its_image_only(
    api: dict[str, RegistryClient],
) -> None:
    definition = definitions.load_benchmark_definition("brats-small")
    cpu_image = sha256_digest(b"cpu image")
    gpu_image = sha256_digest(b"gpu image")
    plain = definitions.benchmark_body(
        definition, image=pinned.EvaluationImage(f"r/eval@{cpu_image}", cpu_image),
        reference_model_id=None)
    gpu = definitions.benchmark_body(
        definition, image=pinned.EvaluationImage(f"r/eval@{gpu_image}", gpu_image),
        reference_model_id=None, accept_experimental=True).model_copy(
            update={"name": "brats-gpu"})
    grants = _grants_of(api, plain, "d1") + _grants_of(api, gpu, "d2")
    assert [g.accept_experimental for g in grants] == [False, True]
    workloads = frozenset(g.identity for g in grants)
    opted = frozenset(g.identity.image_digest for g in grants if g.accept_experimental)
    opted_ids = frozenset(str(g.benchmark_id) for g in grants if g.accept_experimental)
    policy = AssetPolicy(provider=POOL, key_name=KEY, bucket=None, workloads=workloads,
                         include_data=True, experimental_gpu_images=opted,
                         experimental_benchmark_ids=opted_ids)
    condition = attribute_condition(condition_context(policy))
    assert "'EXPERIMENTAL' in assertion.submods.confidential_space.support_attributes" in condition
    assert f"image_digest in ['{gpu_image}']" in condition
    [gpu_grant] = [g for g in grants if g.accept_experimental]
    assert f"SEALBENCH_BENCHMARK_ID in ['{gpu_grant.benchmark_id}']" in condition
    assert plain.image_digest not in condition.split("EXPERIMENTAL")[1]
    without = AssetPolicy(provider=POOL, key_name=KEY, bucket=None, workloads=workloads,
                          include_data=True)
    assert "EXPERIMENTAL" not in attribute_condition(condition_context(without))
