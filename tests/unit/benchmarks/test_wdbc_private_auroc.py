"""The pooled AUROC's sensitivity (benchmarks/wdbc/private_auroc.py), brute-forced: every pair of
neighbouring datasets (one case replaced by any other, its class changing or not) of small
size, scores on a grid with ties, every floor; the largest change of the released statistic is
the theorem's bound, exactly (it holds and is attained)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from sealbench.benchmarks.wdbc import private_auroc as pa

#: Every case a dataset may hold: (malignant?, score) with three score levels, so ties, a case
#: above, between and below the others all occur.
_CASES = tuple((m, s) for m in (True, False) for s in (0.0, 0.5, 1.0))


def _largest_change(n: int, k: int) -> Fraction:
    floor = pa.Floor(n, k)
    datasets = list(itertools.combinations_with_replacement(_CASES, n))
    value = {}
    for d in datasets:
        stat = pa.statistic([m for m, _ in d], [s for _, s in d], floor)
        value[d] = stat.value
    largest = Fraction(0)
    for d in datasets:
        for i in range(n):
            rest = d[:i] + d[i + 1:]
            for case in _CASES:
                neighbour = tuple(sorted((*rest, case), key=_CASES.index))
                largest = max(largest, abs(value[d] - value[neighbour]))
    return largest


@pytest.mark.parametrize(("n", "k"), [(n, k) for n in range(2, 8) for k in range(1, n // 2 + 1)]
                         + [(8, 4)])
def test_replacing_one_case_moves_the_statistic_by_exactly_the_proven_bound(n: int, k: int
                                                                             ) -> None:
    assert _largest_change(n, k) == pa.sensitivity(n, k)


def test_the_second_term_is_what_binds_below_a_third() -> None:
    # n = 8 < 3k - 3 = 9 at k = 4: the class-change term is the larger, and attained (above)
    assert pa.sensitivity(8, 4) == Fraction(1, 8) + Fraction(3, 20) > Fraction(1, 4)
    # at a share of a third or less the bound is 1/k
    assert all(pa.sensitivity(n, pa.floor_of(n, 1 / 3).k) == Fraction(1, pa.floor_of(n, 1 / 3).k)
               for n in range(2, 2000))
