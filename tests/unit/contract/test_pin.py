"""The benchmark pin is one type: parsed once where text enters, held typed, written back as the
same text on every wire (run spec, result documents, registry answers)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from sealbench.contract.pin import PIN_PATTERN, BenchmarkPin, Pin


class _Doc(BaseModel):
    pin: Pin


@pytest.mark.parametrize("text", ["brats-2023-gli/1", "wdbc/1-exact", "brats-2025-met/1-64x64x48"])
def test_text_round_trips(text: str) -> None:
    pin = BenchmarkPin.parse(text)
    assert str(pin) == text and BenchmarkPin.parse(str(pin)) == pin
    doc = _Doc.model_validate({"pin": text})
    assert doc.pin == pin and isinstance(doc.pin, BenchmarkPin)
    assert doc.model_dump(mode="json") == {"pin": text}
    assert _Doc.model_validate_json(doc.model_dump_json()) == doc
    assert _Doc(pin=pin).pin is pin  # a pin passes through unparsed


@pytest.mark.parametrize("text", ["brats", "/1", "Brats/1", "brats/", "a/b/c", "x y/1",
                                  "a" * 49 + "/1", "a/" + "1" * 17, ""])
def test_malformed_text_is_refused_with_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match="plug-in"):
        BenchmarkPin.parse(text)
    with pytest.raises(ValidationError):
        _Doc.model_validate({"pin": text})


@pytest.mark.parametrize("value", [None, 1, ["brats", "1"], {"name": "brats"}])
def test_non_text_is_refused(value: object) -> None:
    with pytest.raises(ValidationError):
        _Doc.model_validate({"pin": value})


def test_the_schema_states_the_pattern_conditions_use() -> None:
    assert _Doc.model_json_schema()["properties"]["pin"] == {"type": "string",
                                                            "pattern": PIN_PATTERN}


def test_a_pin_is_not_equal_to_its_text() -> None:
    """Comparisons are between pins: a reader that compares with text must say str(pin)."""
    assert BenchmarkPin.parse("wdbc/1") != "wdbc/1"
    assert sorted([BenchmarkPin.parse("b/1"), BenchmarkPin.parse("a/2")])[0].name == "a"
