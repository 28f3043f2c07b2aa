"""The aggregator pools a benchmark whose sites publish no per-site release (issue 41, part 4:
a ``-pool`` pin) exactly as it pools the base pin: the sites' statistics are sealed under the
``-pool`` pin, the sites grant the aggregator that pin, and the pooled release, the one public
figure, reads as the base plug-in's (the AUROC of all cases together)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from sealbench.benchmarks.registry import load
from sealbench.benchmarks.wdbc import summary as s
from sealbench.contract.pin import BenchmarkPin
from tests.unit.enclave.test_aggregate import _pool, _wdbc_results

POOLED_ONLY = load(BenchmarkPin.parse("wdbc/1-pool"))


def test_the_aggregator_pools_a_pooled_only_benchmark(tmp_path: Path) -> None:
    rng = np.random.default_rng(41)
    pool = _pool(tmp_path, [_wdbc_results(rng, n, f"s{k}-") for k, n in enumerate((7, 30, 45))],
                 plugin=POOLED_ONLY)
    report, _ = pool.run()
    assert str(report.release.metrics_version) == "wdbc/1-pool"
    every = [r for site in pool.sites for r in site.results]
    # the test's pool draws no noise (LocalExact): read as an exact release of the pooled spec
    exact = replace(POOLED_ONLY.release_spec, exact=True)
    figures = {str(f.ref): f for f in POOLED_ONLY.figures(
        s.parse_pooled_summary(report.release.aggregates, exact))}
    labels = [bool(r.malignant) for r in every]
    scores = [r.penalised_score() for r in every]
    assert figures["auroc"].value == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert report.release.n_cases == len(every) == 82
