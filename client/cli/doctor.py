"""``sealbench doctor``: a read-only check of what your runs need in your cloud, with the
gcloud command that fixes each failure. Parses options, calls :mod:`sealbench.client.assets.doctor`,
and renders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from sealbench.client.cli.common import JsonOpt, ProfileOpt, emit_json, out, session, table
from sealbench.client.errors import ConfigError

__all__ = ["DOCTOR_EXIT", "doctor"]


def doctor(
    benchmark: Annotated[
        int | None, typer.Option(help="also check this benchmark's image is named by digest")
    ] = None,
    mock_tee: Annotated[
        Path | None, typer.Option(help="state directory of the mock TEE (default: the profile's)")
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(help="check for confidential GPU runs (as 'run --accelerator'): the "
                     "regional and all-regions GPU quotas and the zone instead of the CPU quota"),
    ] = None,
    probe_condition: Annotated[
        bool,
        typer.Option("--probe-condition",
                     help="also ask Google whether it accepts the pool provider 'policy sync' "
                     "writes for --dataset or --model now: creates it under a new id, reads it "
                     "back and deletes it (the one check that writes)"),
    ] = False,
    dataset: Annotated[
        int | None, typer.Option(help="with --probe-condition: the dataset whose policy")
    ] = None,
    model: Annotated[
        int | None, typer.Option(help="with --probe-condition: the model whose policy")
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check, read-only, what your runs need in your cloud (credentials, the APIs of your role,
    KMS key, bucket, pool provider; for a profile with a --zone or --service-account, the one
    that runs workloads: the VMs' service account and its roles, the CPU quota, or with
    --accelerator the GPU quotas and zone, and with --benchmark its read access to the image)
    and print the gcloud command that fixes each failure. Roles held under an IAM Condition or
    through a group are shown as unverified. Exit 0 only when every check passes."""
    from sealbench.client.assets import owner
    from sealbench.client.assets.accounts import profile_account
    from sealbench.client.assets.doctor import RunnerSettings, check_owner_cloud
    from sealbench.client.backends import LaunchSettingsError, gpu_machine

    gpu: dict[str, Any] = {}
    if accelerator is not None:
        try:
            machine_type, count = gpu_machine(accelerator)
        except LaunchSettingsError as exc:
            raise ConfigError(str(exc), hint=exc.hint) from exc
        gpu = {"machine_type": machine_type, "accelerator": accelerator, "gpus": count}
    if probe_condition and (dataset is None) == (model is None):
        raise typer.BadParameter("name the asset whose policy to probe: --dataset D or --model M",
                                 param_hint="'--probe-condition'")

    with session(profile) as s:
        cloud = owner.owner_cloud(s.profile, s.client, mock_tee)
        bench = s.client.get_benchmark(benchmark) if benchmark is not None else None
        # the VMs the account's runs start, as 'run --tee confidential-space' defaults them
        # (a profile naming none, or another platform's account: no runner checks)
        account = profile_account(s.profile, mock_tee)
        vms = None if account is None else account.launch_defaults(cloud)
        runner: RunnerSettings | None = None
        if vms is not None and (vms.zone or vms.service_account):
            machine = {} if vms.machine_type is None else {"machine_type": vms.machine_type}
            runner = RunnerSettings(vms.zone, vms.service_account, **(machine | gpu))
        checks = check_owner_cloud(cloud, bench, runner)
        if probe_condition:
            from sealbench.client.assets.doctor import probe_condition as probe

            kind: Literal["dataset", "model"] = "dataset" if dataset is not None else "model"
            checks.append(probe(s.client, cloud, kind, dataset if dataset is not None else
                                model or 0))
    failed = [c for c in checks if not c.ok]
    if json_out:
        emit_json([{"check": c.name, "ok": c.ok, "verified": c.verified, "detail": c.detail,
                    "fix": c.fix} for c in checks])
    else:
        table(f"doctor: profile {s.profile.name}", ("check", "", "found"),
              ((c.name, ("ok" if c.verified else "ok?") if c.ok else "FAIL", c.detail)
               for c in checks))
        for c in failed:
            out().print(f"fix {c.name}: {c.fix}")
        for c in checks:
            if c.ok and not c.verified and c.fix:
                out().print(f"unverified {c.name}: to be sure, {c.fix}")
    if failed:
        raise typer.Exit(code=DOCTOR_EXIT)


#: ``sealbench doctor``'s exit code when a check fails (a cloud problem, as exit 7 is).
DOCTOR_EXIT = 7
