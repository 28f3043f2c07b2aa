"""A pin's variants in plain words where a hospital reads them (issue 45 part 3): the pin stays
the identifier, its grid and how its figures are published are said."""

from __future__ import annotations

import pytest

from sealbench.client.pin_words import pin_in_words, pin_with_words


@pytest.mark.parametrize(("pin", "words"), [
    ("brats-2023-gli/1", "figures with privacy noise"),
    ("brats-2023-gli/1-64x64x48", "small grid 64x64x48; figures with privacy noise"),
    ("brats-2023-gli/1-64x64x48-exact", "small grid 64x64x48; exact figures, no privacy noise"),
    ("wdbc/1-exact", "exact figures, no privacy noise"),
    ("wdbc/1-pool", "no per-site figures: only pooled inside the TEE, with privacy noise"),
])
def test_each_variant_is_said(pin: str, words: str) -> None:
    assert pin_in_words(pin) == words
    assert pin_with_words(pin) == f"{pin} ({words})"
