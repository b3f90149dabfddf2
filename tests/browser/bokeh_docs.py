"""Read the dashboards a page *renders*: the Bokeh documents of every BokehView, and the grid.

A check that a canvas exists passes when the dashboard is wrong; these helpers
read back what the browser holds, so a test can compare it with
``exp.results()``: the DataTable's data source, the rows its grid draws, the
allocation strip's lanes and the header. ``Bokeh.documents`` lists every
document BokehJS made (each BokehView builds its own from the widget's render
bundle); a view re-rendered from a newer bundle clears its old document, so
only documents with roots are live.
"""

from __future__ import annotations

from typing import Any

#: JavaScript returning one summary per live dashboard document in the page
READ_DOCS_JS = """
() => {
  const B = window.Bokeh;
  if (!B || !B.documents) return null;
  const arr = (v) => (v == null ? [] : Array.from(v, (x) => (x === undefined ? null : x)));
  const obj = (d) => (d instanceof Map ? Object.fromEntries(d) : d);
  const out = [];
  for (const doc of B.documents) {
    const roots = typeof doc.roots === "function" ? doc.roots() : doc.roots;
    if (!roots || roots.length === 0) continue;
    const models = Array.from(doc._all_models.values());
    const table = models.find((m) => m.constructor.__name__ === "DataTable");
    if (!table) continue;
    const data = obj(table.source.data);
    const cols = {};
    const lengths = {};
    for (const k of Object.keys(data)) { cols[k] = arr(data[k]); lengths[k] = cols[k].length; }
    const plots = models.filter((m) => m.constructor.__name__ === "Plot" ||
                                       m.constructor.__name__ === "Figure");
    const titled = (word) => plots.find((p) => p.title && String(p.title.text).includes(word));
    const alloc = titled("allocation");
    // the utilization strip shares the allocation strip's time axis
    const util = plots.find((p) => p !== alloc && alloc != null && p.x_range === alloc.x_range);
    // labels keyed by the tick's number: BokehJS looks them up by number, a string key
    // never matches and the axis shows 0.5, 1.5
    const labelled = (o) => o instanceof Map ? Object.fromEntries(
      Array.from(o.entries()).filter(([k]) => typeof k === "number")) : {};
    const lanes = (p) => p == null ? null : {
      end: p.y_range.end, ticks: arr(p.left[0].ticker.ticks),
      labels: labelled(p.left[0].major_label_overrides), title: String(p.title.text)};
    const divs = models.filter((m) => m.constructor.__name__ === "Div").map((m) => m.text);
    // the sources of every glyph: lengths must agree column by column
    const inconsistent = [];
    for (const m of models) {
      if (m.constructor.__name__ !== "ColumnDataSource") continue;
      const d = obj(m.data);
      const ls = new Set(Object.keys(d).map((k) => arr(d[k]).length));
      if (ls.size > 1) inconsistent.push(m.id);
    }
    // the analysis views' sources (named "analysis-..."), and the budget they show
    const analysis = {};
    for (const m of models) {
      const name = m.name == null ? "" : String(m.name);
      if (!name.startsWith("analysis-")) continue;
      if (m.constructor.__name__ === "Select") { analysis.budget = m.value; continue; }
      const d = obj(m.data);
      const src = {};
      for (const k of Object.keys(d)) src[k] = arr(d[k]).map((v) => (
        v != null && typeof v === "object" && v.length !== undefined ? Array.from(v) : v));
      analysis[name.slice("analysis-".length)] = src;
    }
    const imp = titled("hyperparameter importance");  // its title says why it has no bars
    if (imp) analysis.importance_title = String(imp.title.text);
    out.push({cols, lengths, alloc: lanes(alloc), util: lanes(util), divs, inconsistent,
              analysis});
  }
  return out;
}
"""

#: JavaScript returning, for each rendered DataTable grid, the cells of the rows it draws
READ_GRIDS_JS = """
() => {
  // Bokeh 3 renders into shadow roots: walk them to reach the SlickGrid viewports
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.classList && el.classList.contains("slick-viewport")) found.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return found.filter((v) => v.getClientRects().length > 0).map((v) =>
    Array.from(v.querySelectorAll(".slick-row")).map((r) =>
      Array.from(r.querySelectorAll(".slick-cell")).map((c) => c.textContent.trim())));
}
"""


def read_docs(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(READ_DOCS_JS) or []


def read_grids(page: Any) -> list[list[list[str]]]:
    return page.evaluate(READ_GRIDS_JS) or []


def expected_states(truth: dict[str, Any]) -> dict[int, set[str]]:
    """What the table may show for each trial: the engine's state, or ``promoted`` for a trial
    that won a rung and is not running/stopped/failed; starred (``★ ``) for exp.best."""
    best = truth["best"]
    out: dict[int, set[str]] = {}
    for tid, state in truth["states"].items():
        tid = int(tid)
        shown = {state} if state in ("running", "stopped", "error") else {state, "promoted"}
        out[tid] = {f"★ {s}" for s in shown} if tid == best else shown
    return out


def check_doc(doc: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Every way one rendered dashboard disagrees with the experiment's truth (empty: none)."""
    problems = []
    cols, n_workers = doc["cols"], truth["workers"]
    if len(set(doc["lengths"].values())) > 1:
        problems.append(f"table columns of inconsistent lengths {doc['lengths']}")
    if doc["inconsistent"]:
        problems.append(f"{len(doc['inconsistent'])} data sources of inconsistent lengths")
    ids = cols.get("trial_id", [])
    if any(t is None or t != t for t in ids) or any(s in (None, "") for s in cols.get("state", [])):
        problems.append(f"null cells: trial_id={ids} state={cols.get('state')}")
    got_ids = sorted(int(t) for t in ids if t is not None and t == t)
    want_ids = sorted(int(t) for t in truth["states"])
    if got_ids != want_ids:
        problems.append(f"rows {got_ids} != trials {want_ids}")
    want = expected_states(truth)
    for tid, state in zip(ids, cols.get("state", []), strict=False):
        if tid is not None and tid == tid and int(tid) in want and state not in want[int(tid)]:
            problems.append(f"trial {int(tid)} shown {state!r}, is {sorted(want[int(tid)])}")
    bests = [int(t) for t, s in zip(ids, cols.get("state", []), strict=False)
             if str(s).startswith("★")]
    if bests != [truth["best"]]:
        problems.append(f"best rows {bests} != exp.best trial {truth['best']}")
    for name in ("alloc", "util"):
        lanes = doc[name]
        if lanes is None or lanes["end"] != n_workers or len(lanes["ticks"]) != n_workers \
                or len(lanes["labels"]) != n_workers:
            problems.append(f"{name} strip lanes {lanes} != {n_workers} labelled lanes")
    header = " ".join(doc["divs"])
    if "done" not in header:
        problems.append(f"header {header[:200]!r} does not say done")
    if truth.get("dask") and f'href="{truth["dask"]}"' not in header:
        problems.append(f"header links no Dask dashboard ({truth['dask']})")
    return problems


def check_grid(grid: list[list[str]], truth: dict[str, Any]) -> list[str]:
    """The rows the DataTable draws (not only its data): one per trial, the right states."""
    want = expected_states(truth)
    drawn = {}
    for cells in grid:
        if len(cells) >= 2 and cells[0].isdigit():
            drawn[int(cells[0])] = cells[1]
    problems = []
    if sorted(drawn) != sorted(want):
        problems.append(f"grid draws trials {sorted(drawn)} != {sorted(want)}")
    for tid, state in drawn.items():
        if tid in want and state not in want[tid]:
            problems.append(f"grid draws trial {tid} as {state!r}, is {sorted(want[tid])}")
    return problems


def check_analysis(doc: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Every way one rendered dashboard's analysis views disagree with what the kernel computed
    from ``exp.results()`` and ``exp.learning_curves()`` (``truth["analysis"]``)."""
    want, got = truth.get("analysis"), doc.get("analysis") or {}
    if want is None:
        return []
    problems = []
    if got.get("budget") != want["budget"]:
        problems.append(f"budget shown {got.get('budget')!r} != {want['budget']!r}")
    h = got.get("history", {})
    if [int(t) for t in h.get("trial", [])] != want["history"]["trial"]:
        problems.append(f"history points {h.get('trial')} != ended trials "
                        f"{want['history']['trial']}")
    elif not _close(h.get("value", []), want["history"]["value"]):
        problems.append(f"history values {h.get('value')} != {want['history']['value']}")
    best = got.get("best", {}).get("best", [])
    if not _close(best, want["history"]["best"]):
        problems.append(f"best so far {best} != the running best {want['history']['best']}")
    p = got.get("parallel", {})
    if [int(t) for t in p.get("trial", [])] != want["parallel"]["trial"]:
        problems.append(f"parallel lines {p.get('trial')} != trials {want['parallel']['trial']}")
    elif not all(_close(a, b) for a, b in zip(p.get("ys", []), want["parallel"]["ys"],
                                              strict=True)):
        problems.append("parallel coordinates: a line's values differ from the trial's")
    for k, want_slice in want.get("slices", {}).items():  # the metric against each one
        sl = got.get(f"slice-{k}", {})
        pairs = sorted(zip((int(t) for t in sl.get("trial", [])), sl.get("value", []),
                           strict=False))
        if [t for t, _ in pairs] != sorted(want_slice["trial"]) or not _close(
                [v for _, v in pairs], [want_slice["value"][want_slice["trial"].index(t)]
                                        for t, _ in pairs]):
            problems.append(f"slice {k}: {pairs} != {want_slice}")
    imp = got.get("importance", {})
    shown = dict(zip(imp.get("name", []), imp.get("importance", []), strict=False))
    if set(shown) != set(want["importance"]) or not _close(
            [shown[k] for k in sorted(shown)], [want["importance"][k] for k in sorted(shown)]):
        problems.append(f"importance bars {shown} != {want['importance']} (the view's title: "
                        f"{got.get('importance_title')!r})")
    return problems


def _close(a: list[Any], b: list[Any], tol: float = 1e-9) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None
                                      and abs(float(x) - float(y)) <= tol * max(1.0, abs(y)))
        for x, y in zip(a, b, strict=True))
