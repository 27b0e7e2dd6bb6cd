"""The results as a table a person can read (the JSON file holds everything, per run)."""

from __future__ import annotations

from typing import Any

from bench.summary import what_waits
from bench.targets import server_processes


def _ms(figure: dict[str, Any] | None) -> str:
    return "-" if not figure or figure.get("median") is None else f"{figure['median']:.2f}"


def _lat(op: dict[str, Any]) -> str:
    return "/".join(_ms(op.get(p)) for p in ("p50_ms", "p90_ms", "p99_ms"))


def _rate(figure: dict[str, Any]) -> str:
    if figure.get("median") is None:
        return "-"
    if figure["min"] == figure["max"]:
        return f"{figure['median']:,.0f}"
    return f"{figure['median']:,.0f} [{figure['min']:,.0f}-{figure['max']:,.0f}]"


SIDES = (("http", "schedlock over HTTP"), ("direct", "direct asyncpg"), ("etcd", "etcd (JSON gateway)"))


def _cpu_per_cycle(v: dict[str, Any]) -> list[str]:
    """Each side's server-side CPU per cycle: schedlock's server + its Postgres backends, Postgres alone for the
    baseline, the etcd process for etcd. The load generator's own CPU is left out on every side."""
    parts = []
    for side, label in (("http", "schedlock (server + Postgres)"), ("direct", "direct (Postgres)"), ("etcd", "etcd")):
        total, db = (v.get(side) or {}).get("cpu_us_per_cycle"), (v.get(side) or {}).get("db_cpu_us_per_cycle")
        if total and side == "http" and not db:  # Postgres's backends were not visible from here
            parts.append(f"schedlock (server only) {total['median']:,.0f}")
        elif total:
            extra = f", Postgres {db['median']:,.0f}" if db and side == "http" else ""
            parts.append(f"{label} {total['median']:,.0f}{extra}")
    return [f"  {'CPU per cycle, us':<26}" + "; ".join(parts)] if parts else []


def _scaling(scaling: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Two server processes against one, side by side: the figures of each load, and each side's ratio to one."""
    lines = [
        "",
        f"SCALING: two server processes against one, in turns, {c['seconds']} s x {c['scaling_repeat']} runs "
        f"(median [min-max]; the phase took {scaling['seconds']:.0f} s)",
        f"  {'':<26}{'cycles/s':<24}{'x one':<7}{'server+Postgres us/cycle':<26}{'machine busy':<14}"
        f"{'acquire p50/p90/p99 ms':<24}{'errors':<7}",
    ]
    ratios = {"one": None, "workers": "ratio_workers", "replicas": "ratio_replicas"}
    for label in ("uncontended", "contended"):
        v = scaling[label]
        lines.append(f"{label} ({v['names']} names)")
        for side, title in scaling["sides"].items():
            s = v[side]
            ratio = f"{v[ratios[side]]['of_medians']:.2f}" if ratios[side] else "1"
            cpu, db = s.get("cpu_us_per_cycle"), s.get("db_cpu_us_per_cycle")
            cost = f"{cpu['median']:,.0f} (Postgres {db['median']:,.0f})" if cpu and db else "-"
            busy = f"{s['machine_cores_busy']['median']:.2f} cores" if s.get("machine_cores_busy") else "-"
            lines.append(
                f"  {title:<26}{_rate(s['cycles_per_s']):<24}{ratio:<7}{cost:<26}{busy:<14}{_lat(s['acquire']):<24}"
                f"{s['errors']:<7}"
            )
    return lines


def _peer_line(etcd: dict[str, Any]) -> str:
    if etcd["lease"] == "exact":
        how = "a lease per acquisition: acquire = grant + txn, release = txn + revoke (+ revoke when held)"
    elif etcd["lease"] == "revoke":
        how = "a lease per acquisition: acquire = grant + txn, release = revoke (+ revoke when held)"
    else:
        how = "a client's lease reused for 1 s: acquire = txn (+ grant each second), release = txn"
    return f"peer: {etcd['version']}, {how}; {etcd['settings']}"


def render(results: dict[str, Any]) -> str:
    c = results["config"]
    etcd = results.get("peers", {}).get("etcd")
    lines = [
        "",
        f"schedlock benchmark — {results['machine']['description']}",
        f"load generator {results['load_generator']}; code {results['code']['commit']}"
        f"{' (uncommitted changes to the code)' if results['code']['dirty'] else ''}; "
        f"load average {results['machine']['loadavg_start'][0]:.1f} at start, "
        f"{results['machine']['loadavg_end'][0]:.1f} at end",
        f"server auth: {results.get('server', {}).get('auth', 'unknown')}",
        _peer_line(etcd) if etcd else "peer: none",
        "",
        f"THROUGHPUT: {c['clients']} keep-alive clients, closed loop, {c['seconds']} s x {c['repeat']} runs "
        "(median [min-max])",
        f"  {'':<26}{'cycles/s':<24}{'acquire p50/p90/p99 ms':<24}{'release p50/p90/p99 ms':<24}"
        f"{'409 share':<11}{'errors':<7}",
    ]
    for label, v in results["throughput"].items():
        lines.append(f"{label} ({v['names']} names)")
        for side, title in SIDES:
            s = v.get(side, {})
            if not s.get("runs"):
                continue
            held = s["held_fraction"]["median"]
            lines.append(
                f"  {title:<26}{_rate(s['cycles_per_s']):<24}{_lat(s['acquire']):<24}{_lat(s['release']):<24}"
                f"{'-' if held is None else f'{held:.0%}':<11}{s['errors']:<7}"
            )
        cpu, busy = v["http"].get("server_cpu_us_per_request"), v["http"].get("server_cores_busy")
        if cpu and busy:
            lines.append(
                f"  {'server CPU per request':<26}{cpu['median']:,.0f} us; the server process kept "
                f"{busy['median']:.2f} of a core busy"
            )
        machine = {side: (v.get(side) or {}).get("machine_cores_busy") for side in ("http", "etcd")}
        if machine["http"]:
            etcd = f"; etcd's runs {machine['etcd']['median']:.2f}" if machine["etcd"] else ""
            lines.append(
                f"  {'whole machine busy':<26}{machine['http']['median']:.2f} cores during schedlock's runs{etcd}"
            )
        waits = what_waits(v["http"], results["machine"].get("cores") or 0, server_processes(results))
        if waits:
            lines.append(f"  {'what waits':<26}{waits}")
        lines += _cpu_per_cycle(v)
        for key, title in (("ratio", "ratio HTTP / direct"), ("ratio_etcd", "ratio schedlock / etcd")):
            if key in v:
                r = v[key]
                lines.append(f"  {title:<26}{r['of_medians']:.2f} (per-run {r['min']:.2f}-{r['max']:.2f})")
    if "scaling" in results:
        lines += _scaling(results["scaling"], c)
    lat = results["latency"]
    lines += ["", f"LATENCY at {lat['rate_target']:g} cycles/s ({lat['clients']} clients, paced)"]
    for side, title in (("http", "schedlock over HTTP"), ("direct", "direct asyncpg")):
        if side in lat:
            s = lat[side]
            lines.append(
                f"  {title:<26}achieved {s['cycles_per_s']:,.0f} cycles/s; acquire p50 {s['acquire']['p50_ms']} "
                f"p99 {s['acquire']['p99_ms']} ms; release p50 {s['release']['p50_ms']} p99 {s['release']['p99_ms']} "
                f"ms; errors {s['errors']}" + (f"; server RSS {s['server_rss_mb']} MB" if s["server_rss_mb"] else "")
            )
    low = lat.get("low")
    if low:
        lines += [
            "",
            f"LATENCY at low load ({low['rate_target']:g} cycles/s, 1 client, paced; direct: one lone statement; bare "
            "hop: a server that only answers, no database; "
            f"{low.get('turns', 1)} turns each, alternating)",
        ]
        sides = (
            ("http", "schedlock over HTTP"),
            ("direct", "direct asyncpg"),
            ("hop_raw", "bare hop (httptools)"),
            ("hop_uvicorn", "bare hop (uvicorn)"),
        )
        for side, title in sides:
            if side in low:
                a = low[side]["acquire"]
                turns = ", ".join(str(t) for t in low[side].get("turn_acquire_p50_ms", []))
                lines.append(
                    f"  {title:<26}acquire p50 {a['p50_ms']} p90 {a['p90_ms']} p99 {a['p99_ms']} ms"
                    + (f" (each turn's p50: {turns})" if turns else "")
                )
    ls = results["list"]
    lines += ["", f"LIST over {results['table_rows']:,} rows ({ls['rate']:g} requests/s, {ls['clients']} clients)"]
    for label in ("first_page", "prefix_page", "held_page"):
        g = ls[label]["get"]
        lines.append(
            f"  {ls[label]['path']:<40}p50 {g['p50_ms']} ms, p99 {g['p99_ms']} ms, max {g['max_ms']} ms; "
            f"errors {ls[label]['errors']}"
        )
    lines += [
        "",
        f"SERVER RSS: {results.get('server_rss_mb_idle', '-')} MB idle, "
        f"{results.get('server_rss_mb_max', '-')} MB at most under load",
        "",
        "TARGETS (informational; nothing fails on them)",
    ]
    for t in results["targets"].values():
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        if t["target"] == "reported":
            verdict = "" if t["value"] is not None else verdict
        note = "" if t["comparable"] else " (this run's settings differ from the target's)"
        if t["met"] is False and t.get("what_waits"):
            note += f"; what waits: {t['what_waits'].split(':')[0]}"
        if t.get("floor"):
            note += f"; the floor, a bare hop: {t['floor']['raw']} ms ({t['floor']['uvicorn']} through uvicorn)"
        lines.append(f"  {t['what']:<74}{t['target']:<9}{t['value']!s:<12}{verdict}{note}".rstrip())
    if "profile" in results:
        lines += ["", f"PROFILE: {results['profile']['flamegraph']}"]
    return "\n".join(lines)
