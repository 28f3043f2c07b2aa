"""Noise that a relaunch cannot redraw (issue 40): the discrete Gaussian and discrete Laplace
mechanisms, sampled exactly from a keyed deterministic stream.

A pooled release's noise is derived from a secret only the attested aggregator holds (the sites'
released keys, :func:`pool_noise_seed`) and the authorization's digest, so running the
aggregator again on the same authorization gives the very same noise: repetition buys no
averaging, and every different draw needs another authorization, debited on the log first.

**Mechanism.** Releases sum per-case contributions scaled to ``[0, 1]`` and quantized to the grid
``2**-GRID_BITS`` (:func:`sealbench.benchmarks.release.release` quantizes each case's value for
a noise source that declares ``grid_bits``, a
function of that case alone, so replacing one case still moves each sum by at most 1 and the L2
sensitivity is unchanged). On that grid a sum is the integer ``k = sum * 2**GRID_BITS``; the
release adds ``Z ~ N_Z(0, s**2)``, the discrete Gaussian on the integers, and returns
``(k + Z) / 2**GRID_BITS``.

*The discrete Gaussian meets the continuous one's exact curve, by a proven margin.* The declared
sigma is the continuous Gaussian's exact calibration at the stated (ε, δ)
(:func:`sealbench.benchmarks.release.rho_of`), with no slack to spare, so the discrete one is
drawn slightly wider: ``s = sigma·2**GRID_BITS·(1 + MARGIN)``, ``MARGIN = 2**-16`` (its sd is
1.5e-5 above the stated sigma: nothing an interval notices). Why that suffices (d sums, integer
centres q and q' = q + v of neighbours, ``||v||_2 <= Δ·2**GRID_BITS``): Y = q + Z is recovered
from Y + U by rounding, U uniform on [-1/2, 1/2)^d, so the two are equally private. Y + U has
density ``Π_j φ_s(round(w_j))/Z_s`` at ``w = z - q``, and ``|w² - round(w)²| <= |w| + 1/4``, so on
the box ``B = {||w||_∞ <= K·s}`` (for both centres) it lies within ``c·e^{±η}`` of the
continuous ``N(q, s²I)``, ``η = d(K·s + 1/4)/(2s²)``, ``c = (√(2π)s/Z_s)^d <= 1``; off the box
both hold at most ``τ = 2d·e^{-(K - μ' - 1)²/2}``. For every event S this gives
``P(S) <= e^{ε' + 2η} Q(S) + e^η δ_C(μ', ε') + (e^{ε'+η} + 1)τ``, with δ_C the continuous
curve at ``μ' = μ/(1 + MARGIN)``. With K = 40, τ < 1e-300 and, for d <= MAX_SUMS = 4096 sums
and sigma >= 1/μ (Δ >= 1), η <= 5e-5, while widening by MARGIN lowers δ_C by more than e^η and
the 2η shift of ε raise it. ``tests/unit/benchmarks/test_seeded_noise_margin.py`` evaluates this
bound numerically against the stated δ for every (ε, δ) of the accountant's test grid (ε 0.25-8,
δ 1e-5..1e-9; 1, 16, 256 and 4096 sums) at the grid actually used; the source refuses more
than MAX_SUMS sums.

*Laplace.* A Laplace release adds the discrete Laplace ``P(Z = x) ∝ exp(-|x|/t)`` with the
integer ``t = ceil(b·2**GRID_BITS)`` (b = Δ1/ε, the declared scale): at L1 sensitivity
``Δ1·2**GRID_BITS`` on the grid it is pure ``Δ1·2**GRID_BITS/t <= ε``-DP (the ratio of the
two shifted densities, as for the continuous Laplace).

**Sampling** is exact: Algorithms 1-3 of Canonne, Kamath & Steinke (Bernoulli(exp(-gamma)) for
rational gamma, the discrete Laplace, then rejection to the discrete Gaussian) in integer and
:class:`~fractions.Fraction` arithmetic, with no floating point before the final division. The
uniform integers come from ChaCha20's keystream under the 32-byte seed (rejection sampling, so
no modulo bias); the seed is never logged or stored.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Final

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = [
    "GRID_BITS",
    "MARGIN",
    "MAX_SUMS",
    "KeyedStream",
    "SeededDiscreteGaussian",
    "pool_noise_seed",
    "sample_discrete_gaussian",
]

#: The release grid: sums are multiples of 2**-GRID_BITS (exact in float64 up to 2**21 cases).
GRID_BITS: Final = 32
#: How much wider than the declared sigma the discrete Gaussian is drawn (module docstring).
MARGIN: Final = Fraction(1, 2 ** 16)
#: The most sums one draw covers: the margin is proven for at most this many (module docstring).
MAX_SUMS: Final = 4096
_SEED_BYTES: Final = 32
_NOISE_PURPOSE: Final = b"sealbench-pool-noise-v1"


class KeyedStream:
    """Uniform random integers from ChaCha20's keystream under a 32-byte key (deterministic:
    the same key gives the same integers)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != _SEED_BYTES:
            raise ValueError(f"a stream key is {_SEED_BYTES} bytes, received {len(key)}")
        self._cipher = Cipher(algorithms.ChaCha20(key, b"\0" * 16), mode=None).encryptor()

    def _bytes(self, n: int) -> bytes:
        return self._cipher.update(b"\0" * n)

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)`` (rejection sampling)."""
        if n < 1:
            raise ValueError(f"need n >= 1, got {n}")
        if n == 1:
            return 0
        bits = (n - 1).bit_length()
        nbytes = (bits + 7) // 8
        mask = (1 << bits) - 1
        while True:
            value = int.from_bytes(self._bytes(nbytes), "big") & mask
            if value < n:
                return value


def _bernoulli(stream: KeyedStream, p: Fraction) -> bool:
    """True with probability ``p`` in [0, 1]."""
    return stream.below(p.denominator) < p.numerator


def _bernoulli_exp_small(stream: KeyedStream, gamma: Fraction) -> bool:
    """True with probability exp(-gamma), 0 <= gamma <= 1 (CKS Algorithm 1, first part)."""
    k = 1
    while _bernoulli(stream, gamma / k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(stream: KeyedStream, gamma: Fraction) -> bool:
    """True with probability exp(-gamma), gamma >= 0 (CKS Algorithm 1)."""
    while gamma > 1:
        if not _bernoulli_exp_small(stream, Fraction(1)):
            return False
        gamma -= 1
    return _bernoulli_exp_small(stream, gamma)


def _discrete_laplace(stream: KeyedStream, t: int) -> int:
    """P(x) proportional to exp(-|x|/t) on the integers, t >= 1 (CKS Algorithm 2, s = 1)."""
    while True:
        u = stream.below(t)
        if not _bernoulli_exp(stream, Fraction(u, t)):
            continue
        v = 0
        while _bernoulli_exp(stream, Fraction(1)):
            v += 1
        x = u + t * v
        negative = stream.below(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def sample_discrete_gaussian(stream: KeyedStream, sigma2: Fraction) -> int:
    """One draw of the discrete Gaussian N_Z(0, sigma2) on the integers (CKS Algorithm 3),
    ``sigma2`` > 0 exactly."""
    if sigma2 <= 0:
        raise ValueError("the discrete Gaussian needs sigma**2 > 0")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = _discrete_laplace(stream, t)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if _bernoulli_exp(stream, gamma):
            return y


class SeededDiscreteGaussian:
    """A :class:`~sealbench.benchmarks.release.NoiseSource` whose noise is the discrete
    Gaussian (or, for a Laplace release, the discrete Laplace) on the release grid, drawn from a
    keyed stream (module docstring): the same seed gives the same noise."""

    #: Per-case values are quantized to 2**-grid_bits before summing (release() reads this).
    grid_bits: Final = GRID_BITS

    def __init__(self, seed: bytes) -> None:
        self._stream = KeyedStream(seed)

    @property
    def name(self) -> str:
        return "sealbench discrete Gaussian (exact, keyed; Canonne-Kamath-Steinke 2020)"

    def gaussian(self, values: Sequence[float], sigma: float, sensitivity: float,
                 rho: float) -> list[float]:
        if not (sigma > 0 and math.isfinite(sigma)):
            raise ValueError(f"need a finite sigma > 0, got {sigma}")
        if sensitivity ** 2 / (2 * sigma ** 2) > rho * (1 + 1e-9):
            raise ValueError(f"sigma {sigma} does not deliver rho {rho} at sensitivity "
                             f"{sensitivity}")
        if len(values) > MAX_SUMS:
            raise ValueError(f"a release of {len(values)} sums is more than the {MAX_SUMS} "
                             "the keyed discrete Gaussian's margin covers")
        scale = 1 << GRID_BITS
        sigma2 = (Fraction(sigma) * scale * (1 + MARGIN)) ** 2
        out = []
        for value in values:
            grid = Fraction(value) * scale
            if grid.denominator != 1:
                raise ValueError("a sum is not on the release grid (quantize before summing)")
            noisy = int(grid) + sample_discrete_gaussian(self._stream, sigma2)
            out.append(noisy / scale)
        return out

    def laplace(self, values: Sequence[float], scale: float, sensitivity: float,
                epsilon: float) -> list[float]:
        if not (scale > 0 and math.isfinite(scale)) or not (epsilon > 0 and sensitivity > 0):
            raise ValueError(f"need a finite scale > 0, epsilon > 0 and sensitivity > 0, got "
                             f"{scale}, {epsilon}, {sensitivity}")
        grid_scale = 1 << GRID_BITS
        t = math.ceil(Fraction(scale) * grid_scale)
        if Fraction(sensitivity) * grid_scale / t > Fraction(epsilon) * (1 + Fraction(1, 10 ** 9)):
            raise ValueError(f"scale {scale} does not deliver epsilon {epsilon} at L1 "
                             f"sensitivity {sensitivity}")
        out = []
        for value in values:
            grid = Fraction(value) * grid_scale
            if grid.denominator != 1:
                raise ValueError("a sum is not on the release grid (quantize before summing)")
            out.append((int(grid) + _discrete_laplace(self._stream, t)) / grid_scale)
        return out


def pool_noise_seed(authorization_digest: str, site_keys: Iterable[tuple[str, bytes]]) -> bytes:
    """The 32-byte seed of a pooled release's noise: HMAC-SHA256 under each site's released
    dataset key (sorted by run id) of the purpose and the authorization's digest, all chained
    through HMAC-SHA256 keyed by the digest. Whoever lacks any one site's key cannot compute it;
    the same authorization and keys always give the same seed."""
    message = _NOISE_PURPOSE + b"\0" + authorization_digest.encode("ascii")
    state = hmac.new(authorization_digest.encode("ascii"), _NOISE_PURPOSE, hashlib.sha256)
    for run_id, key in sorted(site_keys):
        state.update(run_id.encode("utf-8") + b"\0")
        state.update(hmac.new(key, message, hashlib.sha256).digest())
    return state.digest()
