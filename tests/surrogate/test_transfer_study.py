"""The rank-transfer study's seeds and seed bootstrap (benchmarks/transfer.py --seeds)."""

from __future__ import annotations

import math

import pytest

from nbtune.surrogate.transfer_study import (
    bootstrap_spearman,
    make_target,
    seed_draws,
    seed_mean,
    spearman,
    train_one,
)

CONFIG = {"lr": 0.003, "momentum": 0.9, "batch_size": 128, "gamma": 0.9}


def test_seed_changes_the_run_and_seed_zero_is_reproducible():
    a = train_one("cnn_adam", CONFIG, 8, True, 1)
    assert train_one("cnn_adam", CONFIG, 8, True, 1, seed=0) == a
    b = train_one("cnn_adam", CONFIG, 8, True, 1, seed=1)
    assert b != a and all(math.isfinite(v) for v in a + b)


def test_cnn_channels_size_the_target():
    convs = [m for m in make_target("cnn_adam", (64, 128)) if hasattr(m, "out_channels")]
    assert [c.out_channels for c in convs] == [64, 128]
    assert make_target("cnn_adam")[-1].in_features == 64 * 16  # the default 32/64


def test_seed_mean_and_divergence():
    assert seed_mean([[1.0, 2.0], [3.0, math.inf]]) == [2.0, math.inf]
    assert seed_mean([[1.0, 2.0], [3.0, 6.0]], [1, 1]) == [3.0, 6.0]


def test_bootstrap_spreads_only_with_seed_noise():
    ref = [[float(i) for i in range(8)]] * 3
    same = bootstrap_spearman(ref, ref, seed_draws(3, 50))
    assert same == [pytest.approx(1.0)] * 50  # identical seeds: no spread
    # seed 2's surrogate ranks the configurations backwards: the draws disagree
    sur = [list(range(8)), list(range(8)), list(range(8))[::-1]]
    boot = bootstrap_spearman(ref, [[float(v) for v in r] for r in sur], seed_draws(3, 200))
    assert min(boot) == pytest.approx(-1.0) and max(boot) == pytest.approx(1.0)
    assert spearman(seed_mean(ref), seed_mean(sur)) == pytest.approx(1.0)
