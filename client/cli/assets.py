"""``sealbench dataset ...`` and ``sealbench model ...``: what data owners and model owners do
with their assets (prepare, register, seal, associate, list, show; a dataset's privacy budget
is :mod:`._cli_budget`)."""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from sealbench.client.assets import lifecycle, owner
from sealbench.client.assets import prepare as assets
from sealbench.client.cli.budget import BudgetDeltaOpt, BudgetEpsilonOpt, BudgetGroupOpt
from sealbench.client.cli.common import (
    ConsentExactOpt,
    JsonOpt,
    ProfileOpt,
    emit_json,
    log,
    out,
    plural,
    progress_bar,
    session,
    table,
    user_label,
    warn_experimental,
    warn_privacy_cost,
)
from sealbench.client.errors import (
    CASES_REJECTED_EXIT,
    Interrupted,
    NotAllowedError,
    NotFoundError,
)
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.views import render
from sealbench.server.schemas import (
    AssociationPublic,
    BenchmarkPublic,
    CoordinatesPublic,
    DatasetCreate,
    DatasetPublic,
    ModelPublic,
)

__all__ = ["DefinitionOpt", "dataset_app", "model_app"]

dataset_app = typer.Typer(help="Datasets (hospitals): prepare, register, seal, associate, list.")
model_app = typer.Typer(help="Models (model owners): register, seal, associate, list.")

MockTeeOpt = Annotated[
    Path | None,
    typer.Option(help="state directory of the mock TEE (default: the profile's)"),
]
KmsOpt = Annotated[
    str | None,
    typer.Option(help="KMS key projects/P/locations/L/keyRings/R/cryptoKeys/K (default: yours)"),
]
StorageOpt = Annotated[
    str | None, typer.Option(help="where to upload: gs://BUCKET/PREFIX (default: yours)")
]
PoolOpt = Annotated[
    str | None,
    typer.Option(help="workload identity pool provider that guards the key (default: yours)"),
]
BenchmarkOpt = Annotated[int, typer.Option(help="benchmark id")]
ContractBenchmarkOpt = Annotated[
    int | None,
    typer.Option("--benchmark", help="work under this registered benchmark's contract (its "
                 "plug-in pin)"),
]
DefinitionOpt = Annotated[
    str | None,
    typer.Option(help="without --benchmark: work under this definition's contract, one an "
                 "installed plug-in ships ('sealbench benchmark definition ls') or a definition "
                 "JSON file"),
]
VariantOpt = Annotated[
    str | None,
    typer.Option(help="a demo variant the plug-in offers for quick cases (a smaller grid, "
                 "say: only a benchmark of that variant takes them); see the plug-in's docs"),
]


# -- dataset -----------------------------------------------------------------------------------


@dataset_app.command("synthesize")
def dataset_synthesize(
    out_dir: Annotated[Path, typer.Argument(help="new directory for the raw cases")],
    cases: Annotated[int, typer.Option(help="number of cases")] = 3,
    benchmark: ContractBenchmarkOpt = None,
    definition: DefinitionOpt = None,
    variant: VariantOpt = None,
    first_seed: Annotated[int, typer.Option(help="seed of the first case")] = 1,
    profile: ProfileOpt = None,
) -> list[str]:
    """Write synthetic raw cases (no patient data) to try the workflow: the demo data of the
    plug-in of --benchmark or --definition (one of them is needed), in its raw layout."""
    with contextlib.ExitStack() as stack:
        client = None if benchmark is None else stack.enter_context(session(profile)).client
        bar = stack.enter_context(progress_bar())
        task = bar.add_task("generating cases", total=cases)
        ids = lifecycle.synthesize_dataset(
            client, out_dir, cases, benchmark=benchmark, definition=definition, variant=variant,
            first_seed=first_seed, on_case=lambda _: bar.advance(task))
    out().print(f"{plural(len(ids), 'synthetic case')} in {out_dir}")
    return ids


@dataset_app.command("prepare")
def dataset_prepare(
    raw_dir: Annotated[Path, typer.Argument(help="raw cases, in the layout the plug-in reads")],
    out_dir: Annotated[Path, typer.Argument(help="new directory for the prepared dataset")],
    benchmark: ContractBenchmarkOpt = None,
    definition: DefinitionOpt = None,
    strict: Annotated[
        bool, typer.Option(help="write nothing and exit 3 if any case fails the contract")
    ] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> object:
    """Validate and normalise raw cases against the contract of --benchmark or --definition
    (one of them is needed); lists every rejected case once, with its reason, kept out of the
    prepared dataset, and then exits 11 (with --strict, any rejection writes nothing and exits
    3). Ctrl-C leaves nothing half-written and says so (exit 130).

    The plug-in reads its raw layout (see its docs); an imaging plug-in puts every prepared case
    on the contract's grid: a case on another grid, or an oblique one, is rejected with its
    reason, never resampled."""
    with contextlib.ExitStack() as stack:
        client = None if benchmark is None else stack.enter_context(session(profile)).client
        bar = stack.enter_context(progress_bar())
        task = bar.add_task("preparing cases", total=None)
        prepared = lifecycle.prepare_dataset(
            client, raw_dir, out_dir, benchmark=benchmark, definition=definition, strict=strict,
            progress=lambda d, t: bar.update(task, completed=d, total=t))
    if json_out:
        emit_json(prepared)
        if prepared.rejected:
            raise typer.Exit(CASES_REJECTED_EXIT)
        return prepared
    rejected = (f", {plural(len(prepared.rejected), 'case')} rejected"
                if prepared.rejected else "")
    for note in prepared.notes:
        out().print(note)
    out().print(f"prepared {plural(len(prepared.accepted), 'case')}{rejected} into "
                f"{out_dir}; digest {prepared.dataset_digest}")
    if prepared.rejected:
        table("rejected cases", ("case", "reason"),
              ((r.case, r.reason) for r in prepared.rejected))
    if prepared.rejected:  # the dataset is usable, but not all the cases given are in it
        raise typer.Exit(CASES_REJECTED_EXIT)
    return prepared


@dataset_app.command("ingest")
def dataset_ingest(
    studies: Annotated[Path, typer.Argument(help="one folder per patient: a DICOM study with "
                                            "its annotation, or native NIfTI (--source nifti)")],
    work: Annotated[Path, typer.Argument(help="the hospital's work folder (made 0700; rerun "
                                         "with the same one to resume)")],
    benchmark: ContractBenchmarkOpt = None,
    definition: DefinitionOpt = None,
    source: Annotated[str, typer.Option(help="dicom, or nifti: one ..._<part>.nii.gz per "
                                        "sequence and ..._seg.nii.gz, in native space")] = "dicom",
    mapping: Annotated[Path | None, typer.Option(help="sequence mapping file (JSON) saying "
                                                 "which series is which sequence and what the "
                                                 "annotation's labels are")] = None,
    write_mapping: Annotated[Path | None, typer.Option(help="write the default mapping file "
                                                       "here to edit, and stop")] = None,
    brain_extractor: Annotated[str | None, typer.Option(
        help="your own brain extractor instead of the built-in one: a command with {input} "
             "(the reference sequence, NIfTI) and {output} (the mask it writes), e.g. "
             "'hd-bet -i {input} -o {output}'")] = None,
    accept: Annotated[list[str] | None, typer.Option(
        "--accept", help="accept this case after review (repeat for several)")] = None,
    accept_all: Annotated[bool, typer.Option(help="accept every ready case without asking "
                                             "(scripts)")] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> object:
    """Turn a hospital's studies into cases on the benchmark's grid, for review.

    Each study is converted (refusing mixed series, missing slices, uneven spacing), its
    sequences recognised with the mapping file, co-registered to the reference sequence,
    registered to the template, skull-stripped and resampled onto the contract's grid, its
    annotation carried along. Case ids are pseudonyms; the key (WORK/pseudonyms.json, 0600)
    stays in WORK and no identifier is written anywhere else. Each case gets a review in
    WORK/review/<case>/ (review.json, overview.png, registration.png). Nothing is accepted
    until you say so (asked here, or --accept CASE / --accept-all); accepted cases appear in
    WORK/accepted, the folder to give 'sealbench dataset prepare'. Ctrl-C and rerun: finished
    cases are not redone."""
    with contextlib.ExitStack() as stack:
        client = None if benchmark is None else stack.enter_context(session(profile)).client
        plugin = lifecycle.contract_plugin(client, benchmark=benchmark, definition=definition)
    if write_mapping is not None:
        assets.write_default_mapping(plugin, write_mapping)
        out().print(f"wrote the default sequence mapping to {write_mapping}; edit it and pass "
                    "--mapping")
        return None
    with progress_bar() as bar:
        task = bar.add_task("ingesting studies", total=None)
        report = assets.ingest_studies(
            studies, work, plugin, source=source, mapping_file=mapping,
            progress=lambda d, t: bar.update(task, completed=d, total=t),
            brain_extractor=None if brain_extractor is None else shlex.split(brain_extractor))
    cases = report["cases"]
    ready = [c["case_id"] for c in cases if c["status"] == "ready"]
    chosen: list[str] | None = None
    if accept_all:
        chosen = ready
    elif accept:
        chosen = list(accept)
    if json_out:
        accepted = assets.accept_ingested(plugin, work, chosen) if chosen else ()
        emit_json({"report": report, "accepted": list(accepted)})
        return report
    table("cases", ("case", "status", "template Dice", "brain mL", "WT/TC/ET mL", "notes"),
          ((c["case_id"], c["status"],
            "" if c["template_dice"] is None else f"{c['template_dice']:.3f}",
            "" if c["brain_ml"] is None else f"{c['brain_ml']:.0f}",
            "/".join(f"{c['region_ml'].get(r, 0):.1f}" for r in ("WT", "TC", "ET"))
            if c["region_ml"] else "",
            c["reason"] or "; ".join(c["warnings"])) for c in cases))
    out().print(f"reviews: {work / 'review'} (overview.png, registration.png, review.json)")
    if chosen is None and ready and sys.stdin.isatty() and typer.confirm(
            f"accept the {plural(len(ready), 'ready case')} above?", default=False):
        chosen = ready
    if not chosen:
        out().print("nothing accepted: look at the reviews, then rerun with --accept CASE or "
                    "--accept-all (finished cases are not redone)")
        return report
    accepted = assets.accept_ingested(plugin, work, chosen)
    out().print(f"accepted {plural(len(accepted), 'case')} into {work / 'accepted'}; next: "
                f"sealbench dataset prepare {work / 'accepted'} OUT_DIR")
    return report


def _dataset_rows(rows: tuple[DatasetPublic, ...], me: int) -> None:
    table(
        "datasets",
        ("id", "name", "owner", "cases", "prepared for", "digest"),
        ((d.id, d.name, user_label(d.owner_id, me), d.case_count, d.prepared_for_id,
          d.digest[:19] + "…") for d in rows),
    )


@dataset_app.command("register")
def dataset_register(
    prepared: Annotated[Path, typer.Argument(help="directory written by 'dataset prepare'")],
    name: Annotated[str, typer.Option(help="dataset name on the registry")],
    benchmark: Annotated[int | None, typer.Option(help="benchmark it was prepared for")] = None,
    budget_epsilon: BudgetEpsilonOpt = None,
    budget_delta: BudgetDeltaOpt = None,
    budget_group: BudgetGroupOpt = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="send without asking (the request is still printed first)")] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> DatasetPublic:
    """Register a prepared dataset: its manifest digest, case count, grid and the preparation's
    counts (never data, nothing about a case), your result key's digest (run 'sealbench keys
    init' first), its lifetime privacy budget and one keyed fingerprint per case (HMAC under
    case-fingerprint.key in your profile's secrets, made on first use: back it up with your
    result key). Cases you registered before, under any ids or names, share the earlier
    dataset's privacy budget and its spend (asking them another budget is refused). The exact
    request is printed before it is sent; at a terminal you confirm it (--yes: no question).
    With --benchmark, a dataset prepared under another contract (another grid) is refused."""
    def review(body: DatasetCreate) -> None:
        # what the registry will hold, shown before it leaves this machine (stderr under --json)
        typer.echo(render.exact_request(body), err=json_out)
        if not yes and sys.stdin.isatty() and not typer.confirm("send it?", default=True):
            raise typer.Exit(1)

    with session(profile) as s:
        done = lifecycle.register_dataset(
            s.profile, s.client, prepared, name, benchmark=benchmark,
            budget_epsilon=budget_epsilon, budget_delta=budget_delta, budget_group=budget_group,
            review=review, warn=log.warning)
        shared = None if done.already else _shared_before(s.client, done.dataset, budget_group)
    if done.already:
        return _registered_before(done, json_out)
    created = done.dataset
    if json_out:
        emit_json(created)
    else:
        render.dataset_registered(out(), created, budget_group)
    if shared is not None:  # on stderr under --json: stdout stays the answer
        typer.echo(shared, err=json_out)
    return created


def _shared_before(
    client: RegistryClient, created: DatasetPublic, budget_group: str | None
) -> str | None:
    """What to say when the registry put a dataset registered without --budget-group on an
    earlier dataset's ledger: its cases (their fingerprints) were registered before."""
    if budget_group is not None:
        return None
    budget = client.dataset_budget(created.id)
    earlier = [d for d in budget.datasets if d != created.id]
    if budget.group is None or not earlier:
        return None
    named = ", ".join(f"{d} ({client.get_dataset(d).name})" for d in earlier)
    noun = "dataset" if len(earlier) == 1 else "datasets"
    pronoun = "its" if len(earlier) == 1 else "their"
    return (f"these cases were registered before as {noun} {named}: they share {pronoun} "
            f"privacy budget, spent epsilon {budget.spent_epsilon:.4g} of "
            f"{budget.budget_epsilon:g} at delta {budget.budget_delta:g} "
            f"(budget group {budget.group}; see 'sealbench dataset budget {created.id}')")


def _registered_before(done: lifecycle.DatasetRegistration, json_out: bool) -> DatasetPublic:
    """``dataset register`` run again: the same name and digest is the registration already
    made (nothing is sent), saying which budget it keeps."""
    named, differs = done.dataset, done.kept()
    if json_out:
        emit_json(named)
    else:
        kept = f"; it keeps {', '.join(differs)}" if differs else ""
        out().print(f"dataset {named.id} '{named.name}' is already registered with this "
                    f"digest; nothing changed{kept}")
    return named


def _coords_line(kind: str, asset_id: int, c: CoordinatesPublic) -> str:
    return (f"{kind} {asset_id} sealed to {c.storage_uri}\n  key {c.kms_key_name}\n"
            f"  guarded by {c.wip_provider}")


def _seal(
    kind: AssetKind, asset_id: int, source: Path, profile: str | None, mock_tee: Path | None,
    kms_key: str | None, storage: str | None, pool_provider: str | None, json_out: bool,
) -> owner.SealOutcome:
    done = [0, 0]  # objects sealed, of

    def advance(d: int, t: int) -> None:
        done[:] = [d, t]
        bar.update(task, completed=d, total=t)

    with session(profile) as s, progress_bar() as bar:
        task = bar.add_task(f"sealing {kind} {asset_id}", total=None)
        try:
            outcome = lifecycle.seal_owned_asset(
                s.profile, s.client, kind, asset_id, source, mock_tee=mock_tee,
                kms_key=kms_key, storage=storage, pool_provider=pool_provider, progress=advance)
        except KeyboardInterrupt:
            raise _interrupted_seal(kind, asset_id, *done) from None
    r = outcome.report
    if json_out:
        emit_json({"coordinates": outcome.coordinates, "objects": r.objects,
                   "uploaded": r.uploaded, "reused": r.reused, "resumed": r.resumed_key,
                   "digest": r.digest})
    else:
        resumed = f", {r.reused} already there (resumed)" if r.reused else ""
        out().print(f"{plural(r.uploaded, 'object')} uploaded{resumed}")
        out().print(_coords_line(kind, asset_id, outcome.coordinates))
    return outcome


def _interrupted_seal(kind: AssetKind, asset_id: int, done: int, total: int) -> Interrupted:
    """What a seal stopped by Ctrl-C kept: each object is uploaded whole, the key wrapped
    before any of them, and the registry is told where the asset is only once all are there."""
    kept = (f"{done} of {total} sealed objects were uploaded and are kept (encrypted, their "
            "key stored wrapped beside them)" if total else
            "nothing was uploaded but, perhaps, the wrapped key")
    return Interrupted(
        f"interrupted while sealing {kind} {asset_id}: {kept}; no object is half-written, and "
        f"the registry was not told where the {kind} is, so nothing runs on it yet",
        hint="run the same command again: sealing resumes where it stopped, reusing what was "
        "uploaded")


@dataset_app.command("seal")
def dataset_seal(
    prepared: Annotated[Path, typer.Argument(help="directory written by 'dataset prepare'")],
    dataset: Annotated[int, typer.Option(help="registered dataset id")],
    kms_key: KmsOpt = None,
    storage: StorageOpt = None,
    pool_provider: PoolOpt = None,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> owner.SealOutcome:
    """Encrypt every case with a fresh key, wrap the key with your KMS key, upload to your
    bucket and record where on the registry. Ctrl-C keeps what was uploaded (exit 130): the
    same command resumes from there."""
    return _seal("dataset", dataset, prepared, profile, mock_tee, kms_key, storage,
                 pool_provider, json_out)


def _associate(
    kind: AssetKind, asset_id: int, benchmark: int, profile: str | None, *,
    consent_exact: bool = False,
) -> AssociationPublic:
    def consent(client: RegistryClient, bench: BenchmarkPublic, dataset: int | None) -> None:
        warn_experimental(bench)
        if dataset is not None:
            # the data owner asks to join: it reads what each run publishes and consents
            warn_privacy_cost(client, bench, dataset, consent_exact=consent_exact)
            render.consent_plan(out(), client, bench, dataset)

    with session(profile) as s:
        done = lifecycle.associate_asset(s.client, kind, asset_id, benchmark,
                                         consent_exact=consent_exact, consent=consent)
    render.association(out(), kind, asset_id, benchmark, done.row, already=done.already)
    return done.row


@dataset_app.command("associate")
def dataset_associate(
    dataset: Annotated[int, typer.Option(help="dataset id")],
    benchmark: BenchmarkOpt,
    consent_exact_release: ConsentExactOpt = False,
    profile: ProfileOpt = None,
) -> AssociationPublic:
    """Ask to join a benchmark with a dataset. What each run will publish about the dataset's
    cases (its privacy cost, or EXACT figures) is printed first; a benchmark publishing exact
    figures is joined only with --consent-exact-release."""
    return _associate("dataset", dataset, benchmark, profile,
                      consent_exact=consent_exact_release)


def _coordinates_if_visible(
    client: RegistryClient, kind: AssetKind, asset_id: int
) -> CoordinatesPublic | None:
    try:
        return client.get_coordinates(kind, asset_id)
    except (NotAllowedError, NotFoundError):
        return None


@dataset_app.command("ls")
def dataset_ls(
    mine: Annotated[bool, typer.Option("--mine", help="only datasets you own")] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> tuple[DatasetPublic, ...]:
    """List registered datasets."""
    with session(profile) as s:
        me = s.client.me().id
        rows = s.client.list_datasets(me if mine else None)
    emit_json(rows) if json_out else _dataset_rows(rows, me)
    return rows


@dataset_app.command("show")
def dataset_show(
    dataset: Annotated[int, typer.Argument(help="dataset id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> DatasetPublic:
    """One dataset, and where it is sealed if you may see that (owner or approved party)."""
    with session(profile) as s:
        row = s.client.get_dataset(dataset)
        coords = _coordinates_if_visible(s.client, "dataset", dataset)
    if json_out:
        emit_json({"dataset": row, "coordinates": coords})
        return row
    out().print(
        f"dataset {row.id}: {row.name} (owner {row.owner_id}), {plural(row.case_count, 'case')}"
    )
    out().print(f"digest {row.digest}")
    out().print(f"result recipient {row.statistics.get(assets.RECIPIENT_STATISTIC, '-')}")
    if coords is not None:
        out().print(_coords_line("dataset", row.id, coords))
    return row


# -- model -------------------------------------------------------------------------------------


@model_app.command("register")
def model_register(
    onnx: Annotated[Path, typer.Argument(help="the ONNX model file")],
    name: Annotated[str, typer.Option(help="model name")],
    version: Annotated[str, typer.Option(help="model version")] = "1",
    benchmark: ContractBenchmarkOpt = None,
    definition: DefinitionOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> ModelPublic:
    """Check the ONNX model against the model contract of --benchmark or --definition (one of
    them is needed: a reference model is registered before its benchmark exists), then register
    its digest."""
    with session(profile) as s:
        created = lifecycle.register_model(s.client, onnx, name, version, benchmark=benchmark,
                                           definition=definition, warn=log.warning)
    if json_out:
        emit_json(created)
    else:
        out().print(f"model {created.id} registered: {created.name} {created.version}, "
                    f"digest {created.digest}")
    return created


@model_app.command("seal")
def model_seal(
    onnx: Annotated[Path, typer.Argument(help="the registered ONNX model file")],
    model: Annotated[int, typer.Option(help="registered model id")],
    kms_key: KmsOpt = None,
    storage: StorageOpt = None,
    pool_provider: PoolOpt = None,
    mock_tee: MockTeeOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> owner.SealOutcome:
    """Encrypt the weights with a fresh key wrapped by your KMS key, upload them to your bucket
    and record where on the registry."""
    return _seal("model", model, onnx, profile, mock_tee, kms_key, storage, pool_provider,
                 json_out)


@model_app.command("associate")
def model_associate(
    model: Annotated[int, typer.Option(help="model id")],
    benchmark: BenchmarkOpt,
    profile: ProfileOpt = None,
) -> AssociationPublic:
    """Ask to join a benchmark with a model."""
    return _associate("model", model, benchmark, profile)


@model_app.command("ls")
def model_ls(
    mine: Annotated[bool, typer.Option("--mine", help="only models you own")] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> tuple[ModelPublic, ...]:
    """List registered models."""
    with session(profile) as s:
        me = s.client.me().id
        rows = s.client.list_models(me if mine else None)
    if json_out:
        emit_json(rows)
    else:
        table("models", ("id", "name", "version", "owner", "digest"),
              ((m.id, m.name, m.version, user_label(m.owner_id, me), m.digest[:19] + "…")
               for m in rows))
    return rows


@model_app.command("show")
def model_show(
    model: Annotated[int, typer.Argument(help="model id")],
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> ModelPublic:
    """One model, and where it is sealed if you may see that (owner or approved party)."""
    with session(profile) as s:
        row = s.client.get_model(model)
        coords = _coordinates_if_visible(s.client, "model", model)
    if json_out:
        emit_json({"model": row, "coordinates": coords})
        return row
    out().print(f"model {row.id}: {row.name} {row.version} (owner {row.owner_id})")
    out().print(f"digest {row.digest}; io {row.io_contract}")
    if coords is not None:
        out().print(_coords_line("model", row.id, coords))
    return row
