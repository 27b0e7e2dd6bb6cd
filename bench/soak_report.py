"""The soak's verdicts and its plot: each target checked over the per-window records (docs/reliability.md, "Soak").

A target is ``pass``, ``fail``, or ``n/a`` when the run is too short to judge it (the history cannot be flat
before retention has pruned a first time; RSS growth is judged after the settling time only).
"""

from __future__ import annotations

import html
from typing import Any

#: The targets (issue 46): RSS growth after settling, in MB; p99 of a window against the first window's.
RSS_GROWTH_MB = 10.0
P99_FACTOR = 3.0
#: "Flat": the last third's peak at most this much above the peak of the first third (after settling). A server's
#: FDs are judged without the soak's keep-alive connections to it, which come and go with the load's bursts.
FLAT_SLACK = {"fds": 2, "connections": 2}
#: The history's size once retention caught up: at most this factor of its size then.
HISTORY_FACTOR = 1.25
#: The rate is held when the cycles started reach this share of the target.
RATE_SHARE = 0.95
#: A window's p99 of an operation is judged only over this many samples at least.
MIN_SAMPLES = 50


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def checks(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every target's verdict (``pass``/``fail``/``n/a``) with the figures behind it."""
    cfg, windows = record["config"], record["windows"]
    settled = [w for w in windows if w["t_s"] > cfg["settle_s"]]
    out: dict[str, dict[str, Any]] = {}

    started = sum(w["cycles"] for w in windows)
    wanted = cfg["rate"] * cfg["duration_s"]
    out["rate"] = _verdict(started >= RATE_SHARE * wanted, cycles_per_s=round(started / cfg["duration_s"], 1))
    dropped = sum(w["dropped"] for w in windows)
    unexpected: dict[str, int] = {}
    for w in windows:
        for key, n in w["unexpected"].items():
            unexpected[key] = unexpected.get(key, 0) + n
    out["answers"] = _verdict(not unexpected and not dropped, unexpected=unexpected, dropped=dropped)

    if len(settled) < 2:
        for key in ("rss", "fds", "connections"):
            out[key] = {"verdict": "n/a", "why": "fewer than two windows after settling"}
    else:
        growth = [
            max(w["servers"][i]["rss_mb"] for w in settled) - settled[0]["servers"][i]["rss_mb"]
            for i in range(len(settled[0]["servers"]))
        ]
        out["rss"] = _verdict(max(growth) <= RSS_GROWTH_MB, growth_mb=[round(g, 1) for g in growth])
        out["fds"] = _flat([[s["fds_own"] for s in w["servers"]] for w in settled], FLAT_SLACK["fds"])
        series = [[*(s["pool_open"] for s in w["servers"]), w["pg"]["connections"]] for w in settled]
        out["connections"] = _flat(series, FLAT_SLACK["connections"])

    first = windows[0]["ops"] if windows else {}
    worst: dict[str, float] = {}
    failed = []
    for op, base in first.items():
        if base["n"] < MIN_SAMPLES:
            continue
        ratios = [
            w["ops"][op]["p99_ms"] / base["p99_ms"]
            for w in windows[1:]
            if w["ops"].get(op, {}).get("n", 0) >= MIN_SAMPLES
        ]
        worst[op] = round(max(ratios, default=1.0), 2)
        if worst[op] > P99_FACTOR:
            failed.append(op)
    out["p99"] = _verdict(not failed, worst_vs_first=worst, failed=failed) if len(windows) > 1 else {"verdict": "n/a"}

    caught_up = cfg["retention_s"] + 2 * cfg["prune_interval_s"]
    after = [w for w in windows if w["t_s"] > caught_up]
    if len(after) < 2:
        out["history"] = {"verdict": "n/a", "why": f"retention catches up after {caught_up:.0f} s"}
    else:
        base_bytes = after[0]["history"]["runs_bytes"]
        peak = max(w["history"]["runs_bytes"] for w in after)
        out["history"] = _verdict(
            peak <= HISTORY_FACTOR * base_bytes, at_catch_up_mb=_mb(base_bytes), peak_after_mb=_mb(peak)
        )
    return out


def _flat(series: list[list[int]], slack: int) -> dict[str, Any]:
    """Per column: the last third's peak against the first third's (a leak keeps making new highs)."""
    third = max(1, len(series) // 3)
    first = [max(col) for col in zip(*series[:third], strict=True)]
    last = [max(col) for col in zip(*series[-third:], strict=True)]
    ok = all(b <= a + slack for a, b in zip(first, last, strict=True))
    return _verdict(ok, first_third_peak=first, last_third_peak=last)


def _verdict(ok: bool, **figures: Any) -> dict[str, Any]:
    return {"verdict": "pass" if ok else "fail", **figures}


def _mb(n: float) -> float:
    return round(n / 1e6, 1)


def render(record: dict[str, Any]) -> str:
    """A line per window, then the verdicts."""
    lines = ["t(s)  cycles/s  load  " + "  ".join(f"RSS{i} FD{i} pool{i}" for i in range(record["config"]["servers"]))]
    lines[0] += "  pg-conns  runs-MB  dead  p99(ms): acquire extend release skip read_runs"
    for w in record["windows"]:
        servers = "  ".join(f"{s['rss_mb']:5.1f} {s['fds_own']:3d} {s['pool_open']:3d}" for s in w["servers"])
        p99 = " ".join(
            f"{w['ops'].get(op, {}).get('p99_ms') or 0:6.1f}"
            for op in ("acquire", "extend", "release", "skip", "read_runs")
        )
        h = w["history"]
        lines.append(
            f"{w['t_s']:5.0f} {w['cycles_per_s']:8.1f} {w['loadavg_1m']:5.2f}  {servers}  {w['pg']['connections']:8d}  "
            f"{h['runs_bytes'] / 1e6:7.1f} {h['runs_dead']:5d}  {p99}"
        )
    for name, check in record["checks"].items():
        figures = {k: v for k, v in check.items() if k != "verdict"}
        lines.append(f"{name:<12} {check['verdict'].upper():<5} {figures}")
    return "\n".join(lines)


def svg(record: dict[str, Any]) -> str:
    """Panels over time: RSS, FDs, connections, p99 per operation, the load average, the runs table."""
    windows = record["windows"]
    xs = [w["t_s"] / 60 for w in windows]
    n = record["config"]["servers"]
    present = {op for w in windows for op in w["ops"]}
    ops = [op for op in sorted(present) if not op.startswith("read_")]
    ops += [op for op in ("read_runs", "read_ticks") if op in present]
    panels: list[tuple[str, list[tuple[str, list[float | None]]]]] = [
        ("server RSS (MB)", [(f"server {i}", [w["servers"][i]["rss_mb"] for w in windows]) for i in range(n)]),
        (
            "open file descriptors (without the soak's connections)",
            [(f"server {i}", [w["servers"][i]["fds_own"] for w in windows]) for i in range(n)],
        ),
        (
            "connections",
            [(f"pool {i}", [w["servers"][i]["pool_open"] for w in windows]) for i in range(n)]
            + [("pg_stat_activity", [w["pg"]["connections"] for w in windows])],
        ),
        ("p99 per window (ms)", [(op, [w["ops"].get(op, {}).get("p99_ms") for w in windows]) for op in ops]),
        ("machine load average (1 min)", [("load", [w["loadavg_1m"] for w in windows])]),
        (
            "runs table",
            [
                ("size (MB)", [w["history"]["runs_bytes"] / 1e6 for w in windows]),
                ("dead tuples (k)", [w["history"]["runs_dead"] / 1e3 for w in windows]),
            ],
        ),
    ]
    width, height, left, top = 760, 190, 60, 28
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(panels) + 30}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="100%" height="100%" fill="white"/><text x="{left}" y="16" font-size="13">'
        f"{html.escape(record.get('title', 'soak'))}</text>",
    ]
    x_max = max(xs, default=1) or 1
    for p, (title, series) in enumerate(panels):
        y0 = 30 + p * height
        plot_w, plot_h = width - left - 170, height - top - 22
        values = [v for _, ys in series for v in ys if v is not None]
        y_max = max(values, default=1) * 1.1 or 1
        out.append(f'<text x="{left}" y="{y0 + 14}" font-weight="bold">{html.escape(title)}</text>')
        out.append(f'<rect x="{left}" y="{y0 + top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
        for frac in (0, 0.5, 1):
            y = y0 + top + plot_h * (1 - frac)
            out.append(f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">{y_max * frac:.3g}</text>')
        out.append(f'<text x="{left + plot_w}" y="{y0 + top + plot_h + 14}" text-anchor="end">{x_max:.0f} min</text>')
        out.append(f'<text x="{left}" y="{y0 + top + plot_h + 14}">0</text>')
        for k, (label, ys) in enumerate(series):
            color = colors[k % len(colors)]
            points = " ".join(
                f"{left + plot_w * x / x_max:.1f},{y0 + top + plot_h * (1 - v / y_max):.1f}"
                for x, v in zip(xs, ys, strict=True)
                if v is not None
            )
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>')
            ly = y0 + top + 12 + 14 * k
            out.append(f'<rect x="{left + plot_w + 10}" y="{ly - 8}" width="10" height="3" fill="{color}"/>')
            out.append(f'<text x="{left + plot_w + 24}" y="{ly - 4}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
