"""WDBC data: the raw CSV format (round trip, every malformed input refused with its line), the
demo splits (disjoint, seeded, the documented case mixes) and the shipped models (retraining
with the recorded recipe gives the same predictions)."""

from __future__ import annotations

from importlib import resources

import numpy as np
import onnxruntime as ort
import pytest

from sealbench.benchmarks.wdbc import train
from sealbench.benchmarks.wdbc.data import (
    FEATURES,
    SITES,
    RawFormatError,
    WdbcCase,
    format_raw_csv,
    load_wdbc,
    read_raw_csv,
    split_cases,
)


@pytest.fixture(scope="module")
def wdbc() -> tuple[WdbcCase, ...]:
    return load_wdbc()


def test_the_uci_data_as_documented(wdbc: tuple[WdbcCase, ...]) -> None:
    assert len(wdbc) == 569
    assert sum(c.malignant for c in wdbc) == 212
    assert FEATURES[0] == "radius_mean" and FEATURES[10] == "radius_se"
    assert FEATURES[29] == "fractal_dimension_worst"
    # First UCI row (ID 842302): malignant, radius_mean 17.99, area_worst 2019.
    first = wdbc[0]
    assert first.case_id == "wdbc-0001" and first.malignant
    assert first.features[0] == 17.99 and first.features[FEATURES.index("area_worst")] == 2019.0


def test_raw_csv_round_trips_exactly(wdbc: tuple[WdbcCase, ...]) -> None:
    assert read_raw_csv(format_raw_csv(wdbc)) == wdbc


def _csv(*rows: str) -> bytes:
    header = "case_id,diagnosis," + ",".join(FEATURES)
    return "\n".join([header, *rows]).encode()


_ROW = ",".join(["1.5"] * 30)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "line 1 must be the header"),
        (b"id,diagnosis\n", "line 1 must be the header"),
        (_csv(f"a,X,{_ROW}"), "line 2: diagnosis must be M or B"),
        (_csv(f"a,M,{_ROW},3"), "line 2: 33 columns, expected 32"),
        (_csv(f"a,M,{_ROW}", f"a,B,{_ROW}"), "line 3: case id repeated"),
        (_csv(f"a,M,nan{_ROW[3:]}"), "line 2: features must be finite"),
        (_csv(f"a,M,-1{_ROW[3:]}"), "line 2: features must be finite"),
        (_csv(f"a,M,1e400{_ROW[3:]}"), "line 2: features must be finite"),
        (_csv(f"a,M,abc{_ROW[3:]}"), "line 2: a feature is not a number"),
        (_csv(f"../etc,M,{_ROW}"), "line 2: a case id must be"),
        (_csv(), "holds no cases"),
        (b"\xff\xfe", "not UTF-8"),
        (_csv('"a,M' + _ROW), "line 2"),
    ],
)
def test_malformed_raw_csv_is_refused_with_its_line(data: bytes, message: str) -> None:
    with pytest.raises(RawFormatError, match=message):
        read_raw_csv(data)


def test_oversized_raw_csv_is_refused_before_parsing() -> None:
    with pytest.raises(RawFormatError, match="more than"):
        read_raw_csv(b"x" * ((16 << 20) + 1))


def test_demo_sites_are_disjoint_seeded_and_mixed_as_documented(
    wdbc: tuple[WdbcCase, ...],
) -> None:
    splits = split_cases(wdbc)
    assert split_cases(wdbc) == splits  # seeded
    groups = [splits.training, *splits.sites.values()]
    ids = [c.case_id for group in groups for c in group]
    assert len(ids) == len(set(ids)) == 569  # disjoint and complete
    mix = {name: (sum(c.malignant for c in s), len(s)) for name, s in splits.sites.items()}
    assert mix == {"referral": (60, 100), "screening": (18, 120), "general": (70, 178)}
    assert (sum(c.malignant for c in splits.training), len(splits.training)) == (64, 171)
    assert split_cases(wdbc, seed=1).sites["referral"] != splits.sites["referral"]


def test_a_site_cannot_ask_for_more_cases_than_are_left(wdbc: tuple[WdbcCase, ...]) -> None:
    with pytest.raises(ValueError, match="wants 500 cases"):
        split_cases(wdbc, sites=(SITES[0].__class__("big", 500, 0),))


@pytest.mark.parametrize("name", train.MODELS)
def test_retraining_reproduces_the_shipped_model(name: str, wdbc: tuple[WdbcCase, ...]) -> None:
    shipped = (resources.files("sealbench.benchmarks.wdbc") / "model" / f"{name}.onnx").read_bytes()
    x, y = train.training_arrays(split_cases(wdbc).training)
    retrained = train.to_onnx(train.fit(name, x, y), name)
    every = np.array([c.features for c in wdbc], dtype=np.float32)

    def malignancy(model: bytes) -> np.ndarray:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        return session.run(["probabilities"], {"features": every})[0][:, 1]

    # Any library versions give the same predictions (the same versions, the same bytes).
    np.testing.assert_allclose(malignancy(retrained), malignancy(shipped), atol=1e-4)
