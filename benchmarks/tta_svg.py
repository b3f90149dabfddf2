"""Time to accuracy, drawn: best-so-far accuracy against wall time for each system of the
latest ``vs_peers`` record, one SVG line each (no plotting library needed).

Run: ``python benchmarks/tta_svg.py [out.svg]`` (default ``docs/_static/vs_peers_tta.svg``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLOURS = {"cold": "#1f77b4", "warm": "#17becf", "optuna1": "#d62728", "optuna2": "#ff7f0e",
           "ray": "#2ca02c"}
LABELS = {"cold": "nbtune (cold)", "warm": "nbtune (warm)", "optuna1": "Optuna n_jobs=1",
          "optuna2": "Optuna n_jobs=2", "ray": "Ray Tune"}
W, H, PAD = 640, 360, 56


def latest(path: Path = ROOT / "benchmarks" / "results.jsonl") -> dict[str, Any]:
    """The newest ``vs_peers`` record that has curves."""
    recs = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    recs = [r for r in recs if r.get("name") == "vs_peers" and r["figures"].get("curves")]
    if not recs:
        raise SystemExit("no vs_peers record with curves: run benchmarks/vs_peers.py first")
    return recs[-1]


def svg(curves: dict[str, list[list[float]]], title: str) -> str:
    """The step curves on shared axes: seconds (x) and best accuracy so far (y)."""
    pts = [p for c in curves.values() for p in c]
    t_max = max(t for t, _ in pts) * 1.05
    lo = min(a for _, a in pts)
    y_lo, y_hi = max(0.0, round(lo - 0.02, 2)), 1.0

    def x(t: float) -> float:
        return PAD + (W - 2 * PAD) * t / t_max

    def y(a: float) -> float:
        return H - PAD - (H - 2 * PAD) * (a - y_lo) / (y_hi - y_lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{W / 2}" y="20" text-anchor="middle">{title}</text>',
           f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<text x="{W / 2}" y="{H - 14}" text-anchor="middle">seconds since start</text>',
           f'<text x="14" y="{H / 2}" text-anchor="middle" transform="rotate(-90 14 {H / 2})">'
           'best validation accuracy so far</text>']
    for i in range(6):
        t = t_max * i / 5
        out.append(f'<text x="{x(t):.1f}" y="{H - PAD + 16}" text-anchor="middle">{t:.0f}</text>')
        a = y_lo + (y_hi - y_lo) * i / 5
        out.append(f'<text x="{PAD - 6}" y="{y(a) + 4:.1f}" text-anchor="end">{a:.3f}</text>')
    for k, (name, c) in enumerate(curves.items()):
        if not c:
            continue
        path = [f"{x(c[0][0]):.1f},{y(c[0][1]):.1f}"]
        for (_, a0), (t1, a1) in zip(c, c[1:], strict=False):
            path += [f"{x(t1):.1f},{y(a0):.1f}", f"{x(t1):.1f},{y(a1):.1f}"]
        path.append(f"{x(t_max):.1f},{y(c[-1][1]):.1f}")
        colour = COLOURS.get(name, "#7f7f7f")
        out.append(f'<polyline data-system="{name}" fill="none" stroke="{colour}" '
                   f'stroke-width="2" points="{" ".join(path)}"/>')
        ly = H - PAD - 12 - 16 * (len(curves) - 1 - k)  # bottom right, below the curves
        out.append(f'<line x1="{W - PAD - 130}" y1="{ly}" x2="{W - PAD - 110}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{W - PAD - 104}" y="{ly + 4}">{LABELS.get(name, name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> Path:
    args = sys.argv[1:] if argv is None else argv
    dest = Path(args[0]) if args else ROOT / "docs" / "_static" / "vs_peers_tta.svg"
    rec = latest()
    title = f"vs_peers, {rec['date'][:16].replace('T', ' ')} UTC (median-time round)"
    dest.write_text(svg(rec["figures"]["curves"], title))
    print(dest)
    return dest


if __name__ == "__main__":
    main()
