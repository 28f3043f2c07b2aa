"""Benchmark definitions as library functions the CLI commands and ``sealbench demo`` both
call: loading a definition (shipped by an installed plug-in, or a file), checking it against
its plug-in, the models it ships and the registry request that publishes it. No rendering and
no command-line flags: those are in :mod:`sealbench.client.cli`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.client.errors import ConfigError
from sealbench.client.extras import MissingExtraError, missing_extra
from sealbench.client.images.pinned import EvaluationImage
from sealbench.client.plugins import installed, plugin_registry, shipped_definitions
from sealbench.contract.pin import BenchmarkPin, Pin
from sealbench.server.schemas import BenchmarkCreate

if TYPE_CHECKING:
    from sealbench.benchmarks.interface import Benchmark

__all__ = [
    "DefinitionDocument",
    "benchmark_body",
    "json_file",
    "load_benchmark_definition",
    "shipped_model_bytes",
]


class DefinitionDocument(BaseModel):
    """A benchmark definition as published (``sealbench/benchmark-definition`` version 1): what
    the registry stores is ``contract`` and ``metrics`` as the plug-in ``plugin``
    (``<name>/<version>``) reads them. Other members (reference and baseline models, the
    evaluation image) are kept as they are."""

    model_config = ConfigDict(frozen=True, extra="allow")

    format: Literal["sealbench/benchmark-definition"] = "sealbench/benchmark-definition"
    format_version: Literal[1] = 1
    plugin: Pin | None = None
    name: str
    version: str
    description: str = ""
    contract: dict[str, Any]
    metrics: dict[str, Any]


def _unloadable_plugin_extra() -> MissingExtraError | None:
    """The missing extra that keeps an installed plug-in from loading (its shipped definitions
    are then unknown, and a name the user took from the docs would read as a typo)."""
    from sealbench.benchmarks.interface import BenchmarkError
    registry = plugin_registry()
    for name in registry.names():
        try:
            registry.get(name)
        except BenchmarkError as exc:
            missing = missing_extra(exc)
            if missing is not None:
                return missing
    return None


def _plugin_of_definition(doc: DefinitionDocument) -> Benchmark:
    """The installed plug-in the definition names (or, for a definition without ``plugin``,
    the one installed plug-in whose metrics spec it carries), bound to its contract."""
    from sealbench.benchmarks.interface import BenchmarkError, bind_data_contract
    registry = plugin_registry()
    try:
        if doc.plugin is not None:
            plugin = registry.load(doc.plugin)
        else:
            matching = [registry.get(r.name) for r in registry.available()
                        if registry.get(r.name).metrics_spec() == doc.metrics]
            if len(matching) != 1:
                raise ConfigError(
                    f"definition {doc.name} names no benchmark plug-in and its metrics match "
                    f"{len(matching)} installed ones",
                    hint="add \"plugin\": \"<name>/<version>\" to the definition")
            plugin = matching[0]
        bound = bind_data_contract(plugin, doc.contract)
    except BenchmarkError as exc:
        raise ConfigError(f"definition {doc.name}: {exc}",
                          hint="export a shipped definition and edit it") from exc
    if doc.metrics != bound.metrics_spec() and not _private_twin_metrics(registry, bound, doc):
        raise ConfigError(f"definition {doc.name}: its metrics differ from what plug-in "
                          f"{plugin.ref} scores", hint="keep the exported metrics as they are")
    return bound


def _private_twin_metrics(registry: Any, bound: Benchmark, doc: DefinitionDocument) -> bool:
    """Whether ``bound`` is an exact-release pin (``<version>-exact``) and ``doc`` carries the
    metrics of its private pin: an exported definition whose ``plugin`` was switched to the
    exact pin (the pin decides the release; its metrics then state it)."""
    from sealbench.benchmarks.interface import EXACT_SUFFIX, BenchmarkError, bind_data_contract

    if not (bound.release_spec.exact and bound.ref.version.endswith(EXACT_SUFFIX)):
        return False
    try:
        private = bind_data_contract(
            registry.load(BenchmarkPin(bound.ref.name,
                                       bound.ref.version.removesuffix(EXACT_SUFFIX))),
            doc.contract)
    except BenchmarkError:
        return False
    return bool(doc.metrics == private.metrics_spec())


def load_benchmark_definition(
    name_or_path: str, *, name: str | None = None, version: str | None = None
) -> DefinitionDocument:
    """A definition an installed plug-in ships (``brats``; ``brats-small``, its 64x64x48 demo
    benchmark; ...) or a definition JSON file, published under ``name`` and ``version`` when
    they are given (a variant). Its plug-in must be installed and accept its contract and
    metrics; the returned document names it under ``plugin``."""
    renamed = {k: v for k, v in (("name", name), ("version", version)) if v is not None}
    shipped = shipped_definitions()
    try:
        if name_or_path in shipped:
            raw: dict[str, Any] = shipped[name_or_path]
        else:
            raw = json_file(Path(name_or_path))
        doc = DefinitionDocument.model_validate({**raw, **renamed})
    except ConfigError as exc:
        if name_or_path not in shipped and not Path(name_or_path).exists():
            missing = _unloadable_plugin_extra()
            if missing is not None:
                raise missing from exc
        raise ConfigError(
            f"cannot read benchmark definition {name_or_path}: {exc}",
            hint=f"pass --definition {' or '.join(sorted(shipped)) or 'NAME'} or the path of a "
            "definition JSON file",
        ) from exc
    except ValidationError as exc:
        raise ConfigError(
            f"{name_or_path} is not a benchmark definition ({exc.error_count()} errors)",
            hint="export a shipped one with 'sealbench benchmark definition export' and edit it",
        ) from exc
    plugin = _plugin_of_definition(doc)
    return doc.model_copy(update={"plugin": plugin.ref, "metrics": plugin.metrics_spec()})


def shipped_model_bytes(definition: DefinitionDocument, name: str) -> bytes:
    """The bytes of model ``name`` of a shipped definition (its reference or a baseline), from
    the plug-in that ships the model with the same SHA-256."""
    extra = definition.model_extra or {}
    refs = [extra.get("reference_model"), *(extra.get("baseline_models") or ())]
    digest = next((r.get("sha256") for r in refs if isinstance(r, dict) and r.get("name") == name),
                  None)
    if definition.plugin is None or digest is None:
        raise ConfigError(f"definition {definition.name} ships no model named {name!r}")
    plugin = installed(definition.plugin)
    for shipped in plugin.shipped_models:
        if shipped.sha256 == digest:
            return plugin.model_bytes(shipped.name)
    raise ConfigError(f"plug-in {plugin.ref} does not ship model {name!r} ({digest})")


def benchmark_body(
    definition: DefinitionDocument, *, image: EvaluationImage, reference_model_id: int | None,
    leaderboard_published: bool = False, accept_experimental: bool = False,
    aggregator_digest: str | None = None, witnesses: tuple[str, ...] = (),
    witness_quorum: int = 0,
) -> BenchmarkCreate:
    """The registry request publishing ``definition`` with ``image``, pinned to its plug-in
    (``leaderboard_published``: every signed-in user sees every model's values;
    ``aggregator_digest``: the aggregator image that pools in the TEE, issue 27; ``witnesses``:
    cosigner keys of which ``witness_quorum`` must cosign a checkpoint before the aggregator
    accepts a pool authorization logged in it, issue 40)."""
    plugin = definition.plugin or _plugin_of_definition(definition).ref
    return BenchmarkCreate(
        name=definition.name,
        version=definition.version,
        description=definition.description,
        data_contract=definition.contract,
        metrics_spec=definition.metrics,
        metrics_version=plugin,
        image_reference=image.reference,
        image_digest=image.digest,
        reference_model_id=reference_model_id,
        leaderboard_published=leaderboard_published,
        accept_experimental=accept_experimental,
        aggregator_image_digest=aggregator_digest,
        pool_witnesses=witnesses,
        pool_witness_quorum=witness_quorum,
    )


def json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read JSON from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data
