"""Repeated runs of one load, side by side: each side's medians over its repeats, and the ratios between sides."""

from __future__ import annotations

from typing import Any

from bench.loadgen import Load
from bench.stats import Phase, spread

#: The sides a throughput load runs on: schedlock over HTTP, its statements straight from asyncpg, and etcd.
SIDES = ("http", "direct", "etcd")
#: Ratio name → (numerator side, denominator side).
RATIOS = {"ratio": ("http", "direct"), "ratio_etcd": ("http", "etcd")}


def compare(load: Load, phases: dict[str, list[Phase]], ratios: dict[str, tuple[str, str]] = RATIOS) -> dict[str, Any]:
    """Every side's runs and medians; each ratio of the medians, with the spread of the per-run ratios
    (run i of each side ran in the same round of the alternation). The sides: ``SIDES``, or the ``phases``
    given, when they are others."""
    sides = SIDES if set(phases) <= set(SIDES) else tuple(phases)
    summaries = {side: [p.summary() for p in phases.get(side, [])] for side in sides}
    out: dict[str, Any] = {"clients": load.clients, "names": load.names, "mode": load.mode}
    for side, runs in summaries.items():
        if runs or side != "etcd":  # an older results file has no etcd at all; keep http and direct always
            out[side] = {"runs": runs, **aggregate(runs)}
    for name, (top, bottom) in ratios.items():
        tops, bottoms = summaries[top], summaries[bottom]
        if not (tops and bottoms):
            continue
        pairs = zip(tops, bottoms, strict=True)
        out[name] = spread([t["cycles_per_s"] / b["cycles_per_s"] for t, b in pairs if b["cycles_per_s"]])
        med_t, med_b = out[top]["cycles_per_s"]["median"], out[bottom]["cycles_per_s"]["median"]
        out[name]["of_medians"] = round(med_t / med_b, 3) if med_b else None
    return out


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median (and min/max) over repeated runs of each headline figure."""
    if not runs:
        return {}
    out: dict[str, Any] = {
        key: spread([r[key] for r in runs]) for key in ("cycles_per_s", "requests_per_s", "loadgen_cpu_s")
    }
    for op in ("acquire", "release"):
        out[op] = {p: spread([r[op][p] for r in runs if r[op][p] is not None]) for p in ("p50_ms", "p90_ms", "p99_ms")}
    out["errors"] = sum(r["errors"] for r in runs)
    out["held_fraction"] = spread([r["held_fraction"] for r in runs if r["held_fraction"] is not None])
    for key in ("server_cpu_us_per_request", "cpu_us_per_cycle", "db_cpu_us_per_cycle"):
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = spread(values) if values else None
    busy = [r["server_cpu_s"] / r["seconds"] for r in runs if r["server_cpu_s"] is not None and r["seconds"]]
    out["server_cores_busy"] = spread(busy) if busy else None
    machine = [r["machine_cores_busy"] for r in runs if r.get("machine_cores_busy") is not None]
    out["machine_cores_busy"] = spread(machine) if machine else None
    postgres = [r["db_cpu_s"] / r["seconds"] for r in runs if r.get("db_cpu_s") is not None and r["seconds"]]
    out["postgres_cores_busy"] = spread(postgres) if postgres else None
    loadgen = [r["loadgen_cpu_s"] / r["seconds"] for r in runs if r.get("loadgen_cpu_s") is not None and r["seconds"]]
    out["loadgen_cores_busy"] = spread(loadgen) if loadgen else None
    return out


#: A process this busy (of the cores it can use) is taken as the one that waits: it has no time for more work.
SATURATED = 0.85


def what_waits(side: dict[str, Any], cores: int, processes: int = 1) -> str | None:
    """Where the cores went during a side's runs at saturation, and what the callers waited for: the machine (no
    core idle), the server's processes (each a Python process, on one core at a time), or neither (round trips)."""
    machine, server = dig(side, "machine_cores_busy", "median"), dig(side, "server_cores_busy", "median")
    if machine is None or server is None or not cores:
        return None
    postgres, loadgen = dig(side, "postgres_cores_busy", "median"), dig(side, "loadgen_cores_busy", "median")
    went = f"server {server:.2f}"
    went += f", Postgres {postgres:.2f}" if postgres is not None else ""
    went += f", load generator {loadgen:.2f}" if loadgen is not None else ""
    idle = max(0.0, cores - machine)
    went = f"{went}, idle {idle:.2f} of {cores} cores"
    if machine >= 0.9 * cores:
        return f"the machine: every core busy ({went})"
    if server >= SATURATED * processes:
        who = "the server process: it" if processes == 1 else f"the server's {processes} processes: they"
        most = "a core busy, all one Python process can" if processes == 1 else f"{processes} cores busy, all they can"
        return f"{who} kept {server:.2f} of {most} ({went}); more processes (`--workers`) would use the idle cores"
    return f"round trips: nothing was saturated ({went}); callers waited on requests and statements in flight"


def dig(node: Any, *path: str) -> Any:
    """``node[path[0]][path[1]]...``, or None where the path does not exist (e.g. in an older results file)."""
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def max_rss(results: dict[str, Any]) -> float | None:
    """The largest schedlock server RSS any phase saw (etcd's is kept apart, under ``peers``)."""
    seen: list[float] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "server_rss_mb" and isinstance(v, int | float):
                    seen.append(float(v))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk({k: results.get(k) for k in ("throughput", "latency", "list")})
    return max(seen) if seen else None
