#!/usr/bin/env python3
"""bench/storm-plot.py: the links and the machine's CPUs of storm runs, second by second, as SVG.

Usage: bench/storm-plot.py OUT.svg RUN.json [RUN.json ...]

Each RUN.json is a report of `bootpool storm --json` (bench/storm.sh writes one per run). One
panel per run, one after the other: the server's links together as a share of their capacity
(blue) and the share of the machine's CPUs that was busy (orange), per second from the storm's
start (each panel its own time axis); the seconds the report counted as CPU-bound (90% or
more of the CPUs busy while the links carried under 80%, docs/storm.md "The machine's share")
are shaded. Needs nothing but Python 3.
"""

import json
import sys

WIDTH, PANEL, GAP, LEFT, RIGHT, TOP = 760, 150, 46, 46, 16, 28


def series(report):
    """Per second: the links' share of capacity, the CPUs' busy share, and whether the
    report counted the second as CPU-bound (older reports, without `cpu_bound_seconds`, none)."""
    cap = sum(l["capacity_bps"] for l in report["links"])
    n = max(len(l["per_second_bps"]) for l in report["links"])
    links = [sum(l["per_second_bps"][s] for l in report["links"] if s < len(l["per_second_bps"])) / cap
             for s in range(n)]
    host = report.get("host", {})
    busy = host.get("per_second_busy", [])
    cpu_bound = set(host.get("cpu_bound_seconds", []))
    return links, busy, [s in cpu_bound for s in range(n)]


def panel(out, report, y0):
    links, busy, bound = series(report)
    seconds = len(links)
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda s: LEFT + plot_w * s / seconds
    y = lambda v: y0 + PANEL * (1 - min(max(v, 0.0), 1.0))
    s = report["summary"]
    title = (f"{report['label']}: {s['clients']} clients, all booted after "
             f"{s['all_booted_s']:.1f} s, {sum(bound)} CPU-bound s")
    out.append(f'<text x="{LEFT}" y="{y0 - 8}" font-size="13">{title}</text>')
    for i, b in enumerate(bound):
        if b:
            out.append(f'<rect x="{x(i):.1f}" y="{y0}" width="{x(i + 1) - x(i) + 0.6:.1f}" '
                       f'height="{PANEL}" fill="#f3d9c4"/>')
    out.append(f'<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL}" fill="none" stroke="#999"/>')
    for v in (0.5, 1.0):
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{v * 100:.0f}%</text>')
    for t in range(0, seconds, 10 if seconds <= 100 else 50):
        out.append(f'<text x="{x(t):.1f}" y="{y0 + PANEL + 14}" font-size="11" '
                   f'text-anchor="middle">{t} s</text>')
    for values, colour in ((links, "#1f63b4"), (busy, "#e07b1f")):
        points = " ".join(f"{x(i + 0.5):.1f},{y(v):.1f}" for i, v in enumerate(values))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.8"/>')


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    reports = [json.load(open(p)) for p in sys.argv[2:]]
    height = TOP + len(reports) * (PANEL + GAP) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="16" font-size="12"><tspan fill="#1f63b4">— server links, share '
           f'of capacity</tspan>   <tspan fill="#e07b1f">— machine\'s CPUs busy</tspan>   '
           f'<tspan fill="#c08a60">■ CPU-bound second</tspan></text>']
    for i, r in enumerate(reports):
        panel(out, r, TOP + GAP - 10 + i * (PANEL + GAP))
    out.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
