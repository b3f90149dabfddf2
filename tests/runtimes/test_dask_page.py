"""The nbtune page on the Dask dashboard: published from the engine's thread, read by the page."""

from __future__ import annotations

import sys
import urllib.request

import cloudpickle
import pytest

from nbtune.core.space import uniform

distributed = pytest.importorskip("distributed")
pytest.importorskip("bokeh")
pytestmark = pytest.mark.integration
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train(config, trial):
    for step in range(1, 4):
        if step == 2 and config["lr"] > 0.6:
            raise RuntimeError("this configuration diverges")
        trial.report(step, loss=config["lr"] / step)


def test_trials_and_lanes_reach_the_dask_dashboard(tmp_path):
    from bokeh.document import Document

    import nbtune
    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.runtimes.dask.dask_page import ROUTE, latest, nbtune_doc

    rt = DaskRuntime(n_workers=2, checkpoint_dir=tmp_path, preload=(), warm_processes=1,
                     keep=True)
    try:
        exp = nbtune.tune(train, {"lr": uniform(0.0, 1.0)}, algorithm="random", metric="loss",
                          max_budget=3, num_trials=8, runtime=rt, seed=4)
        exp.wait(120)
        res = exp.results()
        scheduler = rt._cluster.scheduler
        snap = latest(scheduler)
        assert snap is not None and snap["topic"] == rt._topic
        assert snap["total"] == 8 and list(snap["trials"]["trial"]) == sorted(res["trial_id"])
        states = dict(zip(res["trial_id"], res["state"], strict=True))
        assert dict(zip(snap["trials"]["trial"], snap["trials"]["state"], strict=True)) == states
        errors = [e for e in snap["trials"]["error"] if e]
        assert errors and all("diverges" in e for e in errors)
        # the page's Bokeh document, built by the function the dashboard calls
        doc = Document()
        nbtune_doc(scheduler, {}, doc)
        sources = {tuple(sorted(m.data)): m.data for m in doc.models
                   if type(m).__name__ == "ColumnDataSource"}
        table = next(d for k, d in sources.items() if "state" in k)
        segs = next(d for k, d in sources.items() if "lane" in k)
        assert sorted(table["trial"]) == sorted(res["trial_id"])
        assert len({len(v) for v in table.values()}) == 1  # whole, consistent column sets
        assert len({len(v) for v in segs.values()}) == 1
        assert len(set(segs["lane"])) == 2  # one lane per worker
        assert f"{len(res)}/8 ended" in next(m.text for m in doc.models
                                              if type(m).__name__ == "Div")
        # and the dashboard serves it, where nbtune's own dashboard header links it
        from nbtune.ui.figures import summary_html

        link = rt.trials_page_link
        assert link == rt.dashboard_link.rsplit("/", 1)[0] + ROUTE
        with urllib.request.urlopen(link, timeout=30) as r:
            assert r.status == 200
        dash = exp.dashboard(autostart=False)
        assert dash.dask_page == link
        head = summary_html("e", dash.snapshots.take(), dash.dask_link, dash.dask_page)
        assert f'href="{link}"' in head and "trials on Dask" in head
    finally:
        rt.close()
