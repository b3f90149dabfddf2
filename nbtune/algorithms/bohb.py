"""BOHB (Falkner et al., ICML 2018): Hyperband's budgets with a TPE-like density model.

Random sampling of *new* configurations is replaced by a model: for the
largest budget ``b`` with ``|D_b| >= N_min + 2`` observations, the best
``max(N_min, gamma |D_b|)`` configs (good) and the worst
``max(N_min, (1-gamma) |D_b|)`` (bad) are each fitted with a Gaussian KDE
``l(x)`` and ``g(x)`` over the unit-encoded space; ``N_s`` candidates are drawn
from ``l`` with its bandwidth widened by ``bandwidth_factor`` and the one with
the largest ``l(x) / g(x)`` is chosen. A fraction ``rho`` of configs stays random
so the search keeps exploring. ``N_min`` defaults to ``d + 1`` (the paper's
``min_points_in_model``), the least that gives a non-singular KDE in ``d`` dims.

``"bohb"`` runs this on ASHA's asynchronous rungs (like Ray Tune's and Syne
Tune's BOHB schedulers); ``"sync-bohb"`` on Hyperband's synchronous brackets,
exactly as in the paper. ``sync-bohb`` takes Hyperband's ``pipeline_brackets``:
False runs one bracket at a time, as the Fluid artifact's SyncBOHB does (and
then every bracket after the first is drawn from a model that has seen the
brackets before it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nbtune.algorithms._common import EPS, check_fraction, decode, encode
from nbtune.algorithms.algorithm_protocol import AlgorithmError
from nbtune.algorithms.asha import ASHA
from nbtune.algorithms.hyperband import Hyperband
from nbtune.core.space import numeric_domains

__all__ = ["KDEModel", "BOHB", "SyncBOHB", "kde_logpdf"]


def kde_logpdf(kde: Any, points: np.ndarray) -> np.ndarray:
    """log density of a fitted ``gaussian_kde`` at ``points`` (d x m).

    Same value as ``kde.logpdf`` but computed with a whitening transform and
    a log-sum-exp in numpy, without SciPy's per-call triangular solves, whose
    overhead dominates for the tiny models BOHB fits on every sample.
    """
    data = np.asarray(kde.dataset, float).T  # n x d
    chol = np.linalg.cholesky(np.atleast_2d(kde.covariance))
    inv = np.linalg.inv(chol)
    xw = data @ inv.T
    yw = np.asarray(points, float).T @ inv.T  # m x d
    d2 = (yw**2).sum(1)[:, None] - 2 * yw @ xw.T + (xw**2).sum(1)[None, :]
    e = -0.5 * np.maximum(d2, 0.0)
    top = e.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(e - top).sum(axis=1))
    dim = data.shape[1]
    log_norm = np.log(len(data)) + np.log(np.diag(chol)).sum() + 0.5 * dim * np.log(2 * np.pi)
    return lse - log_norm


class KDEModel:
    """The BOHB density model over observations ``budget -> {trial_id: (x, loss)}``.

    :meth:`propose` returns a unit-cube point, or None when the caller should
    sample at random (the random fraction, or too few points yet, or a KDE that
    cannot be fitted even after jitter).
    """

    def __init__(
        self,
        dim: int,
        *,
        top_fraction: float = 0.15,
        min_points_in_model: int | None = None,
        num_samples: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3.0,
    ) -> None:
        self.dim = dim
        self.top_fraction = check_fraction("top_fraction", top_fraction, low=1e-9, high=0.5)
        self.random_fraction = check_fraction("random_fraction", random_fraction)
        n_min = dim + 1 if min_points_in_model is None else min_points_in_model
        if int(n_min) != n_min or n_min < dim + 1:
            raise AlgorithmError(
                f"min_points_in_model must be an integer >= d+1 = {dim + 1}, got {n_min!r}"
            )
        self.min_points = int(n_min)
        if int(num_samples) != num_samples or num_samples < 1:
            raise AlgorithmError(f"num_samples must be a positive integer, got {num_samples!r}")
        self.num_samples = int(num_samples)
        if not bandwidth_factor > 0:
            raise AlgorithmError(f"bandwidth_factor must be > 0, got {bandwidth_factor!r}")
        self.bandwidth_factor = float(bandwidth_factor)
        self.observations: dict[float, dict[int, tuple[np.ndarray, float]]] = {}

    def add(self, budget: float, trial_id: int, x: list[float], loss: float) -> None:
        # failed/NaN results count as the worst possible (as in HpBandSter)
        loss = math.inf if loss is None or math.isnan(loss) else float(loss)
        self.observations.setdefault(float(budget), {})[trial_id] = (np.asarray(x, float), loss)

    def model_budget(self) -> float | None:
        """The largest budget with enough observations to fit both densities.

        Both the good and the (disjoint) bad set need ``min_points`` (at least d+1)
        points, or g(x) would be a degenerate density of one or two points.
        """
        ok = [b for b, obs in self.observations.items()
              if len(obs) - self.split(len(obs))[0].stop >= self.min_points]
        return max(ok) if ok else None

    def split(self, n: int) -> tuple[slice, slice]:
        """The good and the bad observations among ``n`` sorted best first: disjoint sets.

        BOHB: n_l = max(N_min, q·N_b) best points make l(x); the next
        n_g = max(N_min, N_b − n_l) make g(x), so no point is in both (when the
        N_min floor asks for more than are left, g gets the rest, as in HpBandSter).
        """
        n_good = max(self.min_points, int(self.top_fraction * n))
        n_bad = max(self.min_points, n - n_good)
        return slice(0, n_good), slice(n_good, n_good + n_bad)

    def _fit(self, data: np.ndarray, rng: np.random.Generator) -> Any:
        """gaussian_kde of ``data`` (n x d); jitter degenerate data (equal values, categoricals)."""
        from scipy.stats import gaussian_kde

        for scale in (0.0, 1e-3, 1e-2):
            pts = data if scale == 0.0 else data + rng.normal(0.0, scale, size=data.shape)
            try:
                kde = gaussian_kde(pts.T)
                np.linalg.cholesky(np.atleast_2d(kde.covariance))  # raises if not usable
                return kde
            except (np.linalg.LinAlgError, ValueError):
                continue
        return None

    def propose(self, rng: np.random.Generator) -> np.ndarray | None:
        from scipy.stats import gaussian_kde  # lazy: scipy.stats is slow to import

        if self.dim == 0 or rng.random() < self.random_fraction:
            return None
        budget = self.model_budget()
        if budget is None:
            return None
        items = sorted(self.observations[budget].items(), key=lambda kv: (kv[1][1], kv[0]))
        xs = np.array([x for _, (x, _) in items])
        good_idx, bad_idx = self.split(len(xs))
        good, bad = xs[good_idx], xs[bad_idx]
        l_kde, g_kde = self._fit(good, rng), self._fit(bad, rng)
        if l_kde is None or g_kde is None:
            return None
        # l(x) with its bandwidth widened: the same (possibly jittered) points
        wide = gaussian_kde(l_kde.dataset, bw_method=l_kde.factor * self.bandwidth_factor)
        cands = np.clip(wide.resample(self.num_samples, seed=rng), 0.0, 1.0)
        with np.errstate(all="ignore"):
            score = kde_logpdf(l_kde, cands) - kde_logpdf(g_kde, cands)
        score = np.where(np.isnan(score), -np.inf, score)
        return cands[:, int(np.argmax(score))]


class _BOHBSampling:
    """Mixin: model-based ``sample_new_config`` and ``observe`` for a rung algorithm."""

    space: dict[str, Any]
    rng: np.random.Generator
    configs: dict[int, dict[str, Any]]

    def _init_model(self, **model_options: Any) -> None:
        self.domains = numeric_domains(self.space)
        self.model = KDEModel(len(self.domains), **model_options)
        #: "model" or "random" for every config this algorithm sampled, in order
        self.sample_sources: list[str] = []

    def sample_new_config(self) -> dict[str, Any]:
        if self.points_to_evaluate:  # the user's points come before the model's
            self.sample_sources.append("given")
            return self.draw_config()
        u = self.model.propose(self.rng)
        if u is None:
            self.sample_sources.append("random")
            return self.draw_config()
        self.sample_sources.append("model")
        return decode(self.domains, self.space, u)

    def observe(self, trial_id: int, budget: float, loss: float) -> None:
        self.model.add(budget, trial_id, encode(self.domains, self.configs[trial_id]), loss)


class BOHB(_BOHBSampling, ASHA):
    """Asynchronous BOHB: ASHA's promotions, new configs from the KDE model."""

    name = "bohb"

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        top_fraction: float = 0.15,
        min_points_in_model: int | None = None,
        num_samples: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3.0,
        **kwargs: Any,
    ) -> None:
        ASHA.__init__(self, space, **kwargs)
        self._init_model(
            top_fraction=top_fraction, min_points_in_model=min_points_in_model,
            num_samples=num_samples, random_fraction=random_fraction,
            bandwidth_factor=bandwidth_factor,
        )


class SyncBOHB(_BOHBSampling, Hyperband):
    """BOHB as in the paper: Hyperband's synchronous brackets, configs from the KDE model."""

    name = "sync-bohb"

    def __init__(
        self,
        space: Mapping[str, Any],
        *,
        top_fraction: float = 0.15,
        min_points_in_model: int | None = None,
        num_samples: int = 64,
        random_fraction: float = 1 / 3,
        bandwidth_factor: float = 3.0,
        **kwargs: Any,
    ) -> None:
        Hyperband.__init__(self, space, **kwargs)
        self._init_model(
            top_fraction=top_fraction, min_points_in_model=min_points_in_model,
            num_samples=num_samples, random_fraction=random_fraction,
            bandwidth_factor=bandwidth_factor,
        )

    def draws_settled(self) -> bool:
        """True when no outstanding rung result can change what the KDE model draws next.

        The model fits the observations at :meth:`KDEModel.model_budget`, the
        largest budget with enough of them. Results still to come at a lower
        budget change neither; at that budget they change its data; at a higher
        one they change it only if, all in, that budget would have enough.
        """
        m = self.model
        mb = m.model_budget()
        for budget, k in self.outstanding().items():
            if k == 0 or (mb is not None and budget < mb - EPS):
                continue
            if mb is not None and abs(budget - mb) <= EPS:
                return False
            n = len(m.observations.get(float(budget), {})) + k
            if n - m.split(n)[0].stop >= m.min_points:
                return False
        return True
