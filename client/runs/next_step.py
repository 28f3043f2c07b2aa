"""``sealbench next``: the one step this profile takes now, with its command.

What the registry knows of the caller (its datasets, models and benchmarks, whether each asset
is sealed and where it stands in its benchmark, the inbox) and what only this machine knows
(whether the profile has its result key; run records, already merged into the inbox's
:class:`~sealbench.client.runs.inbox.InboxView`) are read once into a :class:`Standing`
(:func:`read_standing`); :func:`next_step` is pure and picks the first step of the path a
participant walks, for the roles it plays (or the one asked):

- anyone: a decision that waits for the caller (approve or reject), a key whose grants lag its
  approvals (``policy sync``), a benchmark to approve (admins), a result to submit;
- a hospital: no result key (``keys init``), no dataset (prepare and register), a dataset not
  sealed (``dataset seal``), not associated (``dataset associate``), an approved evaluation to
  run (``run``);
- a model owner: no model (``model register``), not sealed, not associated;
- an authority: no benchmark (``benchmark create``);
- then what runs, then what waits for someone else, then nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sealbench.client.assets.result_key import load_result_key
from sealbench.client.errors import ConfigError, NotAllowedError, NotFoundError
from sealbench.client.registry.api import AssetKind, RegistryClient
from sealbench.client.registry.profiles import ResolvedProfile
from sealbench.client.runs.inbox import InboxItem, InboxView, merge
from sealbench.client.runs.records import RunStore
from sealbench.server.schemas import BenchmarkPublic

__all__ = ["ROLES", "NextStep", "OwnedAsset", "Role", "Standing", "next_step", "read_standing"]

Role = Literal["hospital", "model-owner", "authority"]
#: The roles ``--role`` names.
ROLES: tuple[Role, ...] = ("hospital", "model-owner", "authority")
#: At most this many benchmarks are asked about a model's associations.
_MOST_BENCHMARKS = 50


@dataclass(frozen=True)
class OwnedAsset:
    """One of the caller's datasets or models: sealed or not, and its links (benchmark id,
    status of the link's latest revision)."""

    kind: AssetKind
    id: int
    name: str
    sealed: bool
    links: tuple[tuple[int, str], ...] = ()
    #: A dataset's benchmark (the one it was prepared and registered for).
    benchmark_id: int | None = None

    @property
    def joined(self) -> bool:
        """It asked to join (or joined) a benchmark: a link pending or approved."""
        return any(status in ("pending", "approved") for _, status in self.links)


@dataclass(frozen=True)
class Standing:
    """What the registry and this machine say about the caller, read once."""

    view: InboxView
    has_result_key: bool
    datasets: tuple[OwnedAsset, ...] = ()
    models: tuple[OwnedAsset, ...] = ()
    #: The caller's own benchmarks.
    benchmarks: tuple[BenchmarkPublic, ...] = ()
    #: Approved benchmarks anyone may ask to join (ids).
    open_benchmarks: tuple[int, ...] = ()

    def roles(self) -> tuple[Role, ...]:
        """The roles the caller plays, from what it owns."""
        played: list[Role] = []
        if self.datasets or any(i.action in ("run", "submit", "running") for i in self.view.items):
            played.append("hospital")
        if self.models:
            played.append("model-owner")
        if self.benchmarks:
            played.append("authority")
        return tuple(played)


@dataclass(frozen=True)
class NextStep:
    """The step: why (``what``), the command that does it (None: nothing to run now) and
    whether the caller is the one to act (False: it waits for someone else, or for nothing)."""

    what: str
    command: str | None
    yours: bool = True

    def to_json(self) -> dict[str, object]:
        return {"what": self.what, "command": self.command, "yours": self.yours}


def _first(items: Iterable[InboxItem], *actions: str) -> NextStep | None:
    for action in actions:
        for item in items:
            if item.action == action:
                return NextStep(f"{item.action}: {item.what}", item.command)
    return None


def _benchmark_arg(standing: Standing) -> str:
    """The benchmark to name in a command: the only open one's id; with none or several open,
    the metavariable ``BENCHMARK`` (as ``RAW_DIR`` and ``NAME`` are): which one to join is the
    hospital's choice, and ``sealbench benchmark ls`` lists them."""
    if len(standing.open_benchmarks) == 1:
        return str(standing.open_benchmarks[0])
    return "BENCHMARK"


def _hospital_setup(standing: Standing) -> NextStep | None:
    if not standing.has_result_key:
        return NextStep("this profile has no result key (it was added before 'profile add' "
                        "made one): results are sealed to it", "sealbench keys init")
    if not standing.datasets:
        b = _benchmark_arg(standing)
        return NextStep(
            "you have no dataset registered: prepare your cases for the benchmark, then "
            "register them (the digest and counts, never the data)",
            f"sealbench dataset prepare RAW_DIR PREPARED_DIR --benchmark {b} && "
            f"sealbench dataset register PREPARED_DIR --name NAME --benchmark {b}")
    return _seal_or_join(standing.datasets, "PREPARED_DIR", standing)


def _seal_or_join(assets: tuple[OwnedAsset, ...], source: str,
                  standing: Standing) -> NextStep | None:
    """Seal the first asset not sealed (``source``: what the seal command reads), else ask
    the first one not linked to join its benchmark."""
    for a in assets:
        if not a.sealed:
            return NextStep(f"{a.kind} {a.name} (#{a.id}) is registered but not sealed into "
                            "your bucket", f"sealbench {a.kind} seal {source} --{a.kind} {a.id}")
    for a in assets:
        if not a.joined:
            b = str(a.benchmark_id) if a.benchmark_id is not None else _benchmark_arg(standing)
            return NextStep(f"{a.kind} {a.name} (#{a.id}) is sealed but has not asked to join "
                            f"benchmark {b}",
                            f"sealbench {a.kind} associate --{a.kind} {a.id} --benchmark {b}")
    return None


def _model_setup(standing: Standing) -> NextStep | None:
    if not standing.models:
        b = _benchmark_arg(standing)
        return NextStep("you have no model registered: register your ONNX weights (their "
                        "digest, never the weights)",
                        f"sealbench model register MODEL.onnx --name NAME --version 1.0 "
                        f"--benchmark {b}")
    return _seal_or_join(standing.models, "MODEL.onnx", standing)


def _authority_setup(standing: Standing) -> NextStep | None:
    pending = [b for b in standing.benchmarks if b.state == "pending"]
    if pending:
        b = pending[0]
        return NextStep(f"waiting: benchmark {b.name} {b.version} (#{b.id}) waits for a "
                        "registry admin's approval; nobody can join it before", None, False)
    if standing.benchmarks:
        return None
    return NextStep("you have no benchmark: publish one from a definition (it waits for an "
                    "admin's approval)",
                    "sealbench benchmark create --definition NAME --tee mock")


def _done(standing: Standing, roles: tuple[Role, ...]) -> NextStep:
    if "authority" in roles and standing.benchmarks:
        b = standing.benchmarks[0].id
        return NextStep(f"nothing waits for you: read benchmark {b}'s verified results",
                        f"sealbench benchmark leaderboard {b}")
    joined = sorted({b for m in standing.models for b, status in m.links
                     if status == "approved"})
    if "model-owner" in roles and joined:
        return NextStep("nothing waits for you: hospitals run your approved models; follow "
                        f"benchmark {joined[0]}'s runs",
                        f"sealbench benchmark progress {joined[0]}", False)
    if "hospital" in roles and standing.view.evaluated:
        return NextStep(f"nothing waits for you: {standing.view.evaluated} approved "
                        "evaluation(s) of your datasets have a verified result", None, False)
    return NextStep("nothing waits for you", None, False)


def next_step(standing: Standing, role: Role | None = None) -> NextStep:
    """The first step of the caller's path (see the module docstring); ``role``: only that
    role's steps (and the decisions and syncs anyone has); None: every role it plays."""
    items = standing.view.items
    roles: tuple[Role, ...] = (role,) if role is not None else standing.roles()
    if not roles:
        return NextStep(
            "you own nothing on this registry yet: say which role you play ('sealbench next "
            "--role hospital', 'model-owner' or 'authority') for its first step", None)
    step = _first(items, "decide", "policy sync needed", "approve benchmark")
    if step is None and "hospital" in roles:
        step = _first(items, "submit")
    setups = {"hospital": _hospital_setup, "model-owner": _model_setup,
              "authority": _authority_setup}
    for played in roles:
        if step is None:
            step = setups[played](standing)
    if step is None and "hospital" in roles:
        step = _first(items, "run")
    if step is None:
        for item in items:
            if item.action in ("running", "waiting"):
                return NextStep(f"{item.action}: {item.what}", item.command, False)
    return step if step is not None else _done(standing, roles)


def _links(client: RegistryClient, kind: AssetKind, asset_id: int,
           benchmarks: Iterable[int]) -> tuple[tuple[int, str], ...]:
    links = []
    for b in benchmarks:
        try:
            history = client.association_history(kind, b, asset_id)
        except (NotFoundError, NotAllowedError):
            continue
        if history:
            latest = max(history, key=lambda a: a.revision)
            links.append((b, latest.status))
    return tuple(links)


def _sealed(client: RegistryClient, kind: AssetKind, asset_id: int) -> bool:
    try:
        client.get_coordinates(kind, asset_id)
    except NotFoundError:
        return False
    return True


def read_standing(profile: ResolvedProfile, client: RegistryClient) -> Standing:
    """The caller's :class:`Standing`: the registry's inbox merged with this machine's run
    records (as ``sealbench inbox`` shows it), whether the profile has its result key, and
    the caller's registrations."""
    view = merge(client.inbox(), RunStore(profile.data_dir / "runs").all())
    try:
        load_result_key(profile.secrets_dir)
        has_result_key = True
    except ConfigError:
        has_result_key = False
    me = client.me()
    every = client.list_benchmarks()
    own = tuple(b for b in every if b.owner_id == me.id)
    open_ids = tuple(b.id for b in every if b.state == "approved")
    datasets = tuple(
        OwnedAsset("dataset", d.id, d.name, _sealed(client, "dataset", d.id),
                   _links(client, "dataset", d.id,
                          (d.prepared_for_id,) if d.prepared_for_id is not None else open_ids),
                   d.prepared_for_id)
        for d in client.list_datasets(owner_id=me.id))
    models = tuple(
        OwnedAsset("model", m.id, m.name, _sealed(client, "model", m.id),
                   _links(client, "model", m.id, open_ids[:_MOST_BENCHMARKS]))
        for m in client.list_models(owner_id=me.id))
    return Standing(view, has_result_key, datasets, models, own, open_ids)
