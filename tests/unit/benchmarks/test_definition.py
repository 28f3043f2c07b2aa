"""The shipped benchmark definition binds its models by SHA-256 and serialises canonically."""

from __future__ import annotations

import pytest

from sealbench.benchmarks import registry
from sealbench.benchmarks.brats.definition import (
    REFERENCE_MODEL,
    SHIPPED_2025_DEFINITIONS,
    SHIPPED_DEFINITIONS,
    WEAK_MODEL,
    BenchmarkDefinition,
    ModelReference,
    load_definition,
    load_model_bytes,
)
from sealbench.benchmarks.brats.errors import ModelDigestMismatchError
from sealbench.benchmarks.brats.results2025 import Metrics2025
from sealbench.contract.pin import BenchmarkPin
from sealbench.crypto.digest import sha256_digest


def test_shipped_models_match_their_recorded_digests() -> None:
    definition = load_definition()
    for name in (REFERENCE_MODEL, WEAK_MODEL):
        ref = definition.model(name)
        data = load_model_bytes(ref)
        assert sha256_digest(data) == ref.sha256
        assert len(data) < 4 * 1024 * 1024


#: Each shipped definition's pin.
PINS = {"brats": "brats-2023-gli/1", "brats-small": "brats-2023-gli/1-64x64x48",
        "brats-2025-gli": "brats-2025-gli/1", "brats-2025-met": "brats-2025-met/1"}


def test_every_shipped_definition_has_a_pin_here() -> None:
    assert set(PINS) == {*SHIPPED_DEFINITIONS, *SHIPPED_2025_DEFINITIONS}


@pytest.mark.parametrize("name", sorted(PINS))
def test_every_shipped_definition_binds_models_its_pin_accepts(name: str) -> None:
    """Each shipped definition (2023 and 2025 pins) round-trips, its models' bytes match their
    digests, and its pin's plug-in accepts them and offers them as shipped models."""
    definition = {**SHIPPED_DEFINITIONS, **SHIPPED_2025_DEFINITIONS}[name]()
    assert BenchmarkDefinition.model_validate_json(definition.to_canonical_json()) == definition
    pin = BenchmarkPin.parse(PINS[name])
    plugin = registry.load(pin)
    assert plugin.definitions()[name]["plugin"] == str(pin)  # type: ignore[attr-defined]
    assert plugin.metrics_spec() == definition.metrics.model_dump(mode="json")
    offered = {m.name: m.sha256 for m in plugin.shipped_models}
    for ref in (definition.reference_model, *definition.baseline_models):
        data = load_model_bytes(ref)
        assert sha256_digest(data) == ref.sha256 == offered[ref.name]
        report = plugin.check_model(data)
        assert report.outputs[0].shape[1] == (5 if isinstance(definition.metrics, Metrics2025)
                                              else 4)


def test_2025_definitions_carry_the_official_configs_metrics() -> None:
    gli, met = (SHIPPED_2025_DEFINITIONS[n]() for n in ("brats-2025-gli", "brats-2025-met"))
    assert isinstance(gli.metrics, Metrics2025) and isinstance(met.metrics, Metrics2025)
    assert gli.metrics.task == "gli" and set(gli.metrics.groups) == {
        "netc", "snfh", "et", "rc", "tc", "wt"}
    assert met.metrics.task == "mets" and set(met.metrics.groups) == {"et", "rc", "tc", "wt"}
    assert gli.contract.label_map.values == met.contract.label_map.values == (1, 2, 3, 4)


def test_tampered_model_is_refused() -> None:
    ref = load_definition().reference_model
    forged = ModelReference.model_validate({**ref.model_dump(), "sha256": "sha256:" + "ab" * 32})
    with pytest.raises(ModelDigestMismatchError, match="records sha256:abab"):
        load_model_bytes(forged)


def test_definition_round_trips_canonically() -> None:
    definition = load_definition()
    data = definition.to_canonical_json()
    again = BenchmarkDefinition.model_validate_json(data)
    assert again == definition and again.digest == definition.digest
    assert definition.evaluation_image_digest is None


def test_image_binding_requires_a_digest() -> None:
    definition = load_definition()
    bound = definition.with_image("registry.example/sealbench-eval:1", "sha256:" + "0f" * 32)
    assert bound.digest != definition.digest
    with pytest.raises(ValueError, match="expected a digest"):
        definition.with_image("registry.example/sealbench-eval:1", "latest")


def test_unknown_fields_are_refused() -> None:
    data = load_definition().model_dump()
    data["metrics"] = {**data["metrics"], "hd95_penalty_mm": 0}
    with pytest.raises(ValueError, match="greater than 0"):
        BenchmarkDefinition.model_validate(data)
    data = {**load_definition().model_dump(), "extra": 1}
    with pytest.raises(ValueError, match="Extra inputs"):
        BenchmarkDefinition.model_validate(data)
