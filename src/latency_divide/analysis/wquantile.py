"""Weighted percentiles (the weighted inverted CDF, Hyndman & Fan type 1 with weights; the
definition: analysis.population's docstring), and the same percentiles of a few rows of values
under many weightings at once (a bootstrap: the values stay, the weights are resampled).

:func:`weighted_percentiles` is ``numpy.quantile(..., weights=, method="inverted_cdf")``.
:func:`resampled_percentiles` gives exactly its numbers for R rows under B weightings, but
sorts each row once instead of once per weighting and searches all B cumulative weights at
once (numpy sorts and searches every slice on its own): the same sort of the same values, the
same cumulative sums in the same order, the same search (tests/test_population_percentiles.py
checks them equal, exactly).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _checked(percentiles, weights) -> np.ndarray:
    p = np.asarray(percentiles, dtype="float64")
    if p.ndim != 1 or not ((p > 0) & (p <= 100)).all():
        raise ValueError(f"percentiles must be numbers in (0, 100], got {list(percentiles)}")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("weights must be finite and >= 0")
    return p


def weighted_percentiles(values, weights, percentiles: Sequence[float]) -> np.ndarray:
    """Weighted inverted-CDF percentiles along the last axis (analysis.population's docstring,
    "Weighted percentile"), by ``numpy.quantile(weights=, method="inverted_cdf")``.

    ``values`` and ``weights`` broadcast to one shape (..., n); NaN values, and values of weight
    0, are left out; where nothing is left the result is NaN. Returns shape
    (..., len(percentiles)). Percentiles must lie in (0, 100].
    """
    x = np.asarray(values, dtype="float64")
    w = np.asarray(weights, dtype="float64")
    x, w = np.broadcast_arrays(x, w)
    p = _checked(percentiles, w)
    missing = np.isnan(x)
    # a left-out value gets weight 0 and sorts last (+inf): the inverted CDF reaches every
    # q in (0, 1] at or before the last value of positive weight, so it is never chosen
    w = np.where(missing, 0.0, w)
    x = np.where(missing, np.inf, x)
    empty = w.sum(axis=-1) <= 0
    w = np.where(empty[..., None], 1.0, w)  # numpy refuses all-zero weights; masked below
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1] + (len(p),), np.nan)
    out = np.quantile(x, p / 100.0, axis=-1, weights=w, method="inverted_cdf")
    out = np.moveaxis(out, 0, -1)
    return np.where(empty[..., None], np.nan, out)


def resampled_percentiles(values, weights, percentiles: Sequence[float]) -> np.ndarray:
    """``weighted_percentiles(values[:, None, :], weights[None], percentiles)``: shape
    (R, B, P) for ``values`` (R, n) and ``weights`` (B, n), the same numbers."""
    x = np.asarray(values, dtype="float64")
    w = np.asarray(weights, dtype="float64")
    p = _checked(percentiles, w)
    (r, n), b = x.shape, w.shape[0]
    if w.shape != (b, n):
        raise ValueError(f"weights of shape {w.shape} for values of shape {x.shape}")
    out = np.full((r, b, len(p)), np.nan)
    if n == 0:
        return out
    q = p / 100.0
    missing = np.isnan(x)
    x = np.where(missing, np.inf, x)  # as weighted_percentiles: weight 0, sorted last
    for i in range(r):
        order = np.argsort(x[i])
        wi = np.where(missing[i], 0.0, w)[:, order]  # (B, n), the row's order
        cdf = wi.cumsum(axis=1, dtype=np.float64)
        total = cdf[:, -1:].copy()
        empty = total[:, 0] <= 0
        total[empty] = 1.0
        cdf /= total
        cdf[cdf == 0] = -1  # leading zero weights: never chosen (as numpy does)
        # searchsorted(cdf_b, q, side="left") for every b: how many of cdf_b are < q
        idx = np.minimum((cdf[:, None, :] < q[None, :, None]).sum(axis=2), n - 1)
        out[i] = x[i][order][idx]
        out[i][empty] = np.nan
    return out
