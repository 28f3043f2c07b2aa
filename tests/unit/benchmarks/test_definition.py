"""The shipped benchmark definition binds its models by SHA-256 and serialises canonically."""

from __future__ import annotations

import pytest

from sealbench.benchmarks.brats.definition import (
    REFERENCE_MODEL,
    WEAK_MODEL,
    BenchmarkDefinition,
    ModelReference,
    load_definition,
    load_model_bytes,
)
from sealbench.benchmarks.brats.errors import ModelDigestMismatchError
from sealbench.crypto.digest import sha256_digest


def test_shipped_models_match_their_recorded_digests() -> None:
    definition = load_definition()
    for name in (REFERENCE_MODEL, WEAK_MODEL):
        ref = definition.model(name)
        data = load_model_bytes(ref)
        assert sha256_digest(data) == ref.sha256
        assert len(data) < 4 * 1024 * 1024


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
