"""The hospital's local dataset steps in the client library: synthesis that an interruption
cannot leave half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealbench.client.assets import prepare as assets


def test_interrupted_synthesis_leaves_nothing_and_a_rerun_succeeds(tmp_path: Path) -> None:
    contract = assets.definition_plugin("brats-small")
    out = tmp_path / "raw"
    cases = assets.synthesize(out, 3, contract)
    with pytest.raises(KeyboardInterrupt):
        for done, _ in enumerate(cases, start=1):
            if done == 2:
                raise KeyboardInterrupt  # Ctrl-C after the second case
    cases.close()
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    ids = list(assets.synthesize(out, 3, contract))
    assert sorted(p.name for p in out.iterdir()) == sorted(ids) and len(ids) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_synthesis_into_an_existing_empty_folder(tmp_path: Path) -> None:
    out = tmp_path / "raw"
    out.mkdir()
    ids = list(assets.synthesize(out, 1, assets.definition_plugin("brats-small")))
    assert [p.name for p in out.iterdir()] == ids
