"""The launcher's refused image pull on the serial port becomes an error that names the
repository, the VM's account and the grant (issue 29, item 7): in the form go-tpm-tools logs it
(containerd's "403 Forbidden", with or without the registry's "denied" text)."""

from __future__ import annotations

from sealbench.gcp._cs_resources import image_pull_denied

SA = "sealbench-runner@h.iam.gserviceaccount.com"
REF = "europe-west4-docker.pkg.dev/auth-1/bench/eval@sha256:" + "ab" * 32
CONTAINERD = (f'cannot pull image: failed to resolve reference "{REF}": pulling from host '
              "europe-west4-docker.pkg.dev failed with status code [manifests sha256:ab]: "
              "403 Forbidden")


def test_containerds_403_names_the_repository_and_the_grant() -> None:
    denied = image_pull_denied(["launcher starting", CONTAINERD,
                                'msg="TEE container launcher exiting" exit_code=1'], SA, REF)
    assert denied is not None
    assert str(denied) == ("the VM could not pull the evaluation image: repository bench "
                           f"(europe-west4, project auth-1) does not let {SA} download it")
    assert denied.hint.startswith(
        "the image's owner grants it: gcloud artifacts repositories add-iam-policy-binding bench "
        f"--location=europe-west4 --project=auth-1 --member=serviceAccount:{SA} "
        "--role=roles/artifactregistry.reader")
    assert denied.failure_class == "permission"


def test_another_registry_is_named_without_an_artifact_registry_grant() -> None:
    other = "ghcr.io/someone/eval@sha256:" + "ab" * 32
    denied = image_pull_denied([CONTAINERD.replace(REF, other)], SA, other)
    assert denied is not None and "gcloud" not in denied.hint and other in str(denied)


def test_no_pull_failure_no_error() -> None:
    assert image_pull_denied(["workload finished with a non-zero return code"], SA, REF) is None


def test_the_project_wide_gpu_quota_gets_its_own_request_command() -> None:
    """A new project's GPUS_ALL_REGIONS is 0: Compute refuses the GPU VM 'globally', and the
    hint asks for that quota, not a regional one (issue 29, item 4)."""
    from google.api_core import exceptions as gexc

    from sealbench.gcp._cs_resources import (
        QuotaExceeded,
        VmSettings,
        translate_api_error,
    )

    settings = VmSettings(project="h-1", zone="us-central1-a", service_account=SA,
                          image_reference=REF)
    error = translate_api_error(
        gexc.Forbidden("Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."),  # type: ignore[no-untyped-call]
        "creating the VM", settings)
    assert isinstance(error, QuotaExceeded)
    assert "--quota-id=GPUS-ALL-REGIONS-per-project --preferred-value=1 --project=h-1" in (
        error.hint)
    assert "in region" not in error.hint
