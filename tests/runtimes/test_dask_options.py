"""``DaskRuntime``'s option objects: every keyword in exactly one, with the same default,
and they unpack into the keywords (a keyword given twice is an error)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from nbtune.runtimes.dask import DaskClusterOptions, DaskRuntime, DaskTrialOptions


def test_the_groups_cover_every_keyword_once_with_its_default():
    params = {n: p for n, p in inspect.signature(DaskRuntime).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fields = [f for cls in (DaskClusterOptions, DaskTrialOptions)
              for f in dataclasses.fields(cls)]
    assert sorted(f.name for f in fields) == sorted(params)
    for f in fields:
        assert f.default == params[f.name].default, f.name


def test_options_unpack_into_the_keywords(tmp_path):
    cluster = DaskClusterOptions(n_workers=3, threads_per_worker=2, keep=True)
    trials = DaskTrialOptions(warm_processes=0, trial_timeout=60, checkpoint_dir=tmp_path,
                              execution="process")
    assert dict(**cluster)["n_workers"] == 3 and set(trials) == set(trials.keys())
    rt = DaskRuntime(**cluster, **trials)  # nothing starts until the first experiment
    try:
        assert (rt.n_workers, rt.threads_per_worker, rt.keep) == (3, 2, True)
        assert (rt.warm_processes, rt.trial_timeout, rt.execution) == (0, 60.0, "process")
        assert rt.checkpoint_dir == tmp_path
    finally:
        rt.close()
    with pytest.raises(TypeError, match="multiple values"):
        DaskRuntime(**cluster, n_workers=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cluster.n_workers = 5  # type: ignore[misc]
