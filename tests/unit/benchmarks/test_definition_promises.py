"""A shipped benchmark definition's description promises only figures its runs publish: the
metrics the plug-in's release carries are named as published, and the ones that stay in each
hospital's private per-case results (HD95, lesion-wise figures, NSD, ...) are said to be
private, never promised on the leaderboard."""

from __future__ import annotations

import re

import pytest

from sealbench.benchmarks.registry import PluginRegistry

#: Released column metric -> how the description names it.
#: ``defined`` (BraTS 2025, metric definition version 2): per group, the count of the cases where
#: the group is defined, which each mean is over.
PUBLISHED_NAMES = {"dice": "Dice", "dsc": "global Dice", "pq_dsc": "panoptic quality",
                   "defined": "the count of those cases"}
#: Figures no BraTS release carries.
PRIVATE_ONLY = ("HD95", "Hausdorff", "lesion-wise", "NSD", "sensitivity", "specificity", "F1")


def _brats_definitions() -> list[tuple[str, str, set[str]]]:
    registry = PluginRegistry()
    found = []
    for ref in registry.available():
        if not ref.name.startswith("brats-"):
            continue
        plugin = registry.get(ref.name)
        released = {c.key.split(":")[0] for c in plugin.release_spec.columns}
        for name, doc in plugin.definitions().items():
            found.append((name, str(doc["description"]), released))
    return found


@pytest.mark.parametrize(("name", "description", "released"), _brats_definitions(),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "")
def test_description_promises_only_published_figures(
        name: str, description: str, released: set[str]) -> None:
    promised, _, private = description.partition("Each hospital's private per-case results")
    assert re.search(r"[Pp]ublished:", promised), name
    for metric in released:
        assert PUBLISHED_NAMES[metric] in promised, (name, metric)
    for word in PRIVATE_ONLY:
        assert word not in promised, (name, word)
    if private:
        assert "never published" in private, name
