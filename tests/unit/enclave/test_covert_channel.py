"""A model built to leak (issue 25): it recognises a target patient's case and encodes its
presence in its own output, which the owner then reads in the published figures. Run through the
whole enclave (sealed assets, key release, scoring, release) twice, with the target in the
dataset and with another patient in its place; what the model owner sees is the release, and
the best test between the two worlds' releases is no better than the privacy loss permits."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from sealbench.benchmarks.brats.published import contributions
from sealbench.benchmarks.release import OpenDPGaussian, release
from sealbench.client.runs.result_open import download_result, open_result
from sealbench.platforms import LocalBlobStore

#: The victim's case (the seed the synthetic generator draws it from).
TARGET_SEED = 7


def _fingerprint(case: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(case.modalities["t1n"]).tobytes()).hexdigest()


class _LeakyModel:
    """Predicts like the honest model, except on the target, where it predicts nothing: Dice 0
    in every region, the loudest signal a segmentation can give (a one-bit channel through the
    owner's own scores)."""

    target: str = ""

    def __init__(self, benchmark: Any, model: bytes) -> None:
        self._inner = benchmark.load_model(model)

    def predict(self, case: Any) -> Any:
        targeted = _fingerprint(case) == self.target  # before predict consumes the volumes
        prediction = self._inner.predict(case)
        return prediction * 0 if targeted else prediction


def _released_rows(world: Any, target: str) -> tuple[Any, np.ndarray]:
    _LeakyModel.target = target
    world.run(make_runner=_LeakyModel)
    opened = open_result(download_result(LocalBlobStore(world.results()), ""), world.recipient)
    return opened, contributions(list(opened.cases), opened.benchmark.metrics)


def test_model_encoding_a_target_in_its_scores_learns_no_more_than_epsilon_allows(
    tmp_path: Path, prepared_factory: Any, world_factory: Any, small_contract: Any
) -> None:
    from sealbench.benchmarks.brats.cases import load_case_from_bytes

    with_target = prepared_factory(tmp_path / "with", (1, 2, 3, 4, TARGET_SEED))
    without = prepared_factory(tmp_path / "without", (1, 2, 3, 4, 8))
    folder = next(p for p in sorted((with_target / "data" / "cases").iterdir())
                  if p.name.endswith(f"{TARGET_SEED:05d}-000"))
    files = {f"cases/{folder.name}/{p.name}": p.read_bytes() for p in folder.iterdir()}
    world_in = world_factory(tmp_path / "w-in", prepared=with_target)
    target = _fingerprint(load_case_from_bytes(files, small_contract))

    opened_in, rows_in = _released_rows(world_in, target)
    _, rows_out = _released_rows(world_factory(tmp_path / "w-out", prepared=without),
                                          target)
    # the channel works on the exact scores (the hospital's own, sealed): the model predicted
    # nothing on the target, so its whole tumour scores 0, and the two worlds' sums differ
    ids = [c.case_id for c in opened_in.cases]
    assert rows_in[ids.index(folder.name), 0] == 0.0
    assert not np.allclose(rows_in.sum(axis=0), rows_out.sum(axis=0))
    # what leaves the enclave is a release with the pin's noise
    published = opened_in.aggregates.release
    assert published.mechanism == "gaussian" and published.epsilon == 1.0
    # The owner's best test: the likelihood-ratio test between the two release distributions
    # (Gaussians with the same covariance: a threshold on the projection onto their mean
    # difference). Its accuracy over both worlds must stay within (eps, delta)-DP's bound.
    spec = opened_in.benchmark.release_spec
    noise = OpenDPGaussian()
    gap = rows_out.sum(axis=0) - rows_in.sum(axis=0)
    midpoint = (rows_in.sum(axis=0) + rows_out.sum(axis=0)) / 2
    trials = 600
    right = 0
    for rows, present in ((rows_in, True), (rows_out, False)):
        for _ in range(trials):
            sums = np.array([c.sum for c in release(rows, spec, noise).columns])
            guess_present = float((sums - midpoint) @ gap) < 0
            right += guess_present == present
    accuracy = right / (2 * trials)
    bound = math.e / (1 + math.e) + spec.delta  # the most any test can reach at eps = 1
    slack = 3 * math.sqrt(0.25 / (2 * trials))
    assert accuracy <= bound + slack, (accuracy, bound)
