"""The workload uid's length as :mod:`sealbench.gcp._cs_cel` and the docs state it (issue 44,
part 8: they said 290, which no uid is): computed from ``WorkloadIdentity.uid()`` for the
shortest and longest benchmark ids and pins, and for the pins installed today."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from sealbench.contract.workload import WorkloadIdentity
from sealbench.crypto.digest import sha256_digest

DIGEST = sha256_digest(b"x")
DOCS = Path(__file__).resolve().parents[3] / "docs"


def _uid(data: bool, benchmark: str, pin: str) -> int:
    return len(WorkloadIdentity(DIGEST, DIGEST if data else None, DIGEST, DIGEST, benchmark,
                                pin).uid())


def test_the_stated_uid_lengths_are_the_computed_ones() -> None:
    installed = sorted(f"{e.name}/1" for e in importlib.metadata.entry_points(
        group="sealbench.benchmarks"))
    shortest = min(installed, key=len)
    assert shortest == "wdbc/1" and _uid(True, "1", shortest) == 301
    assert _uid(True, "1", "brats-2023-gli/1") == 311
    longest_pin = "a" * 48 + "/" + "A" * 16  # PIN_PATTERN's longest
    assert _uid(True, "9" * 18, longest_pin) == 377
    assert (_uid(False, "1", shortest), _uid(False, "9" * 18, longest_pin)) == (231, 307)


def test_the_docs_and_comments_say_so_and_no_longer_say_290() -> None:
    from sealbench.gcp import _cs_cel, _doctor_probe

    for text in (_cs_cel.__doc__ or "", _doctor_probe.__doc__ or "",
                 (DOCS / "gcp-setup.md").read_text()):
        assert "301 to 377" in text
        assert "290-character" not in text and "= 290" not in text
