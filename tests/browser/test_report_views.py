"""The offline HTML report (``exp.report``) in chromium agrees with ``exp.results()``.

A real simulated ASHA run (so most trials stop at the first rung and the views
filter on a budget) writes its report; chromium opens the file, with no server
and no network, and the test reads back the Bokeh document BokehJS built from
it (:mod:`tests.browser.bokeh_docs`). Every analysis view must show what the
kernel computes from the run's own ``exp.results()`` and
``exp.learning_curves()`` at the default budget: one history point per trial
that reached it and the running best, one parallel-coordinates line per trial
with its values on every axis, the importance bars, one slice point per trial
and hyperparameter; and the run's table holds every trial in its state, with
``exp.best`` starred.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nbtune
from nbtune.core import trial_analysis as an
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.browser.bokeh_docs import check_analysis, check_doc, read_docs
from tests.browser.tune_notebook import wait_until

pytestmark = pytest.mark.browser

SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1), "wd": nbtune.uniform(0.0, 0.1),
         "width": nbtune.choice([32, 64, 128])}
GPUS = 4


@pytest.fixture(scope="module")
def run() -> nbtune.Experiment:
    return nbtune.tune(SyntheticWorkload(SPACE, seed=5), algorithm="asha", metric="loss",
                       mode="min", max_budget=9, num_trials=24, name="report", seed=5,
                       runtime=SimRuntime(cluster=GPUS))


def truth_of(exp: nbtune.Experiment) -> dict[str, Any]:
    """What the report must show, computed from ``exp.results()`` and
    ``exp.learning_curves()`` the way the kernel computes the views (not from the
    dashboard's snapshot the report is rendered from)."""
    r = exp.results()
    lc = exp.learning_curves()
    cfg = [c for c in r.columns if c.startswith("config/")]
    rows = [{"trial_id": int(x["trial_id"]), "last": x["last"], "budget": x["budget_used"],
             "start": x["start"], "config": {c[7:]: x[c] for c in cfg}}
            for x in r.to_dict("records")]
    table = an.trial_table(exp.metric, exp.mode, rows, zip(lc["trial_id"], lc["time"],
                                                            strict=True))
    b = an.default_budget(table)
    h = an.history(table, budget=b)
    pc = an.parallel_coordinates(table, SPACE, budget=b)
    axes = [*SPACE, exp.metric]
    importance = an.importance(table, SPACE, budget=b)
    assert importance, "enough trials reached the default budget for the forest"
    analysis = {
        "budget": f"{b:g}",
        "history": {"trial": list(h.trial_id), "value": list(h.value), "best": list(h.best)},
        "parallel": {"trial": pc["trial_id"],
                     "ys": [[0.5 if pc[f"{k}/unit"][i] is None else pc[f"{k}/unit"][i]
                             for k in axes] for i in range(len(pc["trial_id"]))]},
        "importance": importance,
        "slices": {k: {"trial": v["trial_id"], "value": v["value"]}
                   for k, v in an.slices(table, SPACE, budget=b).items()},
    }
    return {"states": {int(t): s for t, s in zip(r["trial_id"], r["state"], strict=True)},
            "best": int(exp.best["trial_id"]), "workers": GPUS, "analysis": analysis}


def test_the_report_shows_the_views_of_the_results(page, run: nbtune.Experiment,
                                                   tmp_path: Path) -> None:
    path = run.report(tmp_path / "report.html")
    truth = truth_of(run)
    assert 0 < len(truth["analysis"]["history"]["trial"]) < len(truth["states"])  # a budget
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(path.resolve().as_uri())
    wait_until(lambda: read_docs(page), 60, "BokehJS to build the report's document")
    docs = read_docs(page)
    assert len(docs) == 1
    problems = check_doc(docs[0], truth) + check_analysis(docs[0], truth)
    assert problems == [], "\n".join(problems)
    # every view has its tab, and a tab shows its view when clicked
    for title, name in (("history", "history"), ("importance", "importance"),
                        ("parallel coordinates", "parallel"), ("slices", "slices")):
        tab = page.locator(".bk-tab", has_text=title).first
        tab.click()
        wait_until(lambda tab=tab: "bk-active" in (tab.get_attribute("class") or ""), 10,
                   f"the {name} tab to open")
    assert errors == []
