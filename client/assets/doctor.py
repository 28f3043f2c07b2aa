"""``sealbench doctor``: read-only checks of what an owner's runs need in its cloud, each with the
command that fixes a failure. The library behind the command: :func:`check_owner_cloud` returns
one :class:`Check` per item and never changes anything; :func:`probe_condition` is the one step
that does (``doctor --probe-condition``).

The checks of the cloud itself are its platform's
(:meth:`~sealbench.platforms.owner_cloud.OwnerCloud.doctor_checks`; Google Cloud's, which the
INSECURE mock cloud passes with the same client code, are in :mod:`sealbench.gcp.doctor`:
credentials, the APIs of the owner's role, the KMS key, the bucket, the pool provider, and for a
runner its service account, quotas and image access). Here: the platform-neutral ones (given a
benchmark, that its image is named by digest), in the order doctor prints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from sealbench.platforms.owner_cloud import Check, OwnerCloud, RunnerSettings

if TYPE_CHECKING:
    from sealbench.client.registry.api import RegistryClient
    from sealbench.server.schemas import BenchmarkPublic

__all__ = ["Check", "RunnerSettings", "check_owner_cloud", "probe_condition"]


def check_owner_cloud(
    cloud: OwnerCloud,
    benchmark: BenchmarkPublic | None = None,
    runner: RunnerSettings | None = None,
) -> list[Check]:
    """Every check for ``cloud`` (``runner``'s account and quota, and ``benchmark``'s image,
    when given): the platform's, then the image reference's (none when the cloud could not be
    reached at all)."""
    from sealbench.client.assets.accounts import client_errors

    with client_errors():
        checks = cloud.doctor_checks(
            runner, None if benchmark is None else benchmark.image_reference
        )
    if not checks or not checks[0].ok:
        return checks
    if benchmark is not None:
        digest_named = "@sha256:" in benchmark.image_reference
        checks.append(Check(
            "image reference", digest_named, benchmark.image_reference,
            None if digest_named else "the authority pins the image by digest: "
            "'sealbench benchmark create --image-reference REPO@sha256:… --image-digest …'",
        ))
    return checks


def probe_condition(
    client: RegistryClient, cloud: OwnerCloud, kind: Literal["dataset", "model"],
    asset_id: int,
) -> Check:
    """``doctor --probe-condition``: whether the cloud accepts the policy ``policy sync`` would
    write for ``asset_id`` now, for the approved workloads of it and of the owner's assets
    sharing its key and provider (as :func:`sealbench.client.assets.owner.sync_policy` gathers
    them)."""
    from sealbench.client.assets.owner import client_errors, sharing_grants

    coords = client.get_coordinates(kind, asset_id)
    grants = [g for found in sharing_grants(client, kind, asset_id, coords).values()
              for g in found]
    with client_errors():
        return cloud.probe_condition(
            coords,
            frozenset(g.identity for g in grants),
            include_data=kind == "dataset",
            experimental_gpu_images=frozenset(
                g.identity.image_digest for g in grants if g.accept_experimental),
            experimental_benchmark_ids=frozenset(
                str(g.benchmark_id) for g in grants if g.accept_experimental),
        )
