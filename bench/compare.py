"""``python -m bench.compare A.json B.json ...``: the headline figures of several runs, side by side."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.summary import dig

Getter = Callable[[dict[str, Any]], Any]


def _get(*path: str) -> Getter:
    return lambda data: dig(data, *path)


ROWS: list[tuple[str, Getter]] = [
    ("code", lambda d: f"{d['code']['commit']}{'+' if d['code']['dirty'] else ''}"),
    ("load average at start", lambda d: round(d["machine"]["loadavg_start"][0], 1)),
    ("uncontended: HTTP cycles/s", _get("throughput", "uncontended", "http", "cycles_per_s", "median")),
    ("uncontended: direct cycles/s", _get("throughput", "uncontended", "direct", "cycles_per_s", "median")),
    ("uncontended: ratio HTTP/direct", _get("throughput", "uncontended", "ratio", "of_medians")),
    ("uncontended: HTTP acquire p50 ms", _get("throughput", "uncontended", "http", "acquire", "p50_ms", "median")),
    ("uncontended: HTTP acquire p99 ms", _get("throughput", "uncontended", "http", "acquire", "p99_ms", "median")),
    (
        "uncontended: server CPU us/request",
        _get("throughput", "uncontended", "http", "server_cpu_us_per_request", "median"),
    ),
    ("uncontended: etcd cycles/s", _get("throughput", "uncontended", "etcd", "cycles_per_s", "median")),
    ("uncontended: ratio schedlock/etcd", _get("throughput", "uncontended", "ratio_etcd", "of_medians")),
    ("uncontended: server+db CPU us/cycle", _get("throughput", "uncontended", "http", "cpu_us_per_cycle", "median")),
    ("uncontended: etcd CPU us/cycle", _get("throughput", "uncontended", "etcd", "cpu_us_per_cycle", "median")),
    ("contended: HTTP cycles/s", _get("throughput", "contended", "http", "cycles_per_s", "median")),
    ("contended: ratio HTTP/direct", _get("throughput", "contended", "ratio", "of_medians")),
    ("contended: etcd cycles/s", _get("throughput", "contended", "etcd", "cycles_per_s", "median")),
    ("contended: ratio schedlock/etcd", _get("throughput", "contended", "ratio_etcd", "of_medians")),
    ("latency run: achieved cycles/s", _get("latency", "http", "cycles_per_s")),
    ("latency run: acquire p50 ms", _get("latency", "http", "acquire", "p50_ms")),
    ("latency run: acquire p99 ms", _get("latency", "http", "acquire", "p99_ms")),
    ("list first page: p50 ms", _get("list", "first_page", "get", "p50_ms")),
    ("list first page: p99 ms", _get("list", "first_page", "get", "p99_ms")),
    ("list held=true: p99 ms", _get("list", "held_page", "get", "p99_ms")),
    ("server RSS max MB", _get("server_rss_mb_max")),
]


def render(files: list[Path]) -> str:
    runs = [json.loads(f.read_text()) for f in files]
    width = max(14, *(len(f.stem) + 1 for f in files))
    lines = [f"{'':<36}" + "".join(f"{f.stem:>{width}}" for f in files)]
    for label, get in ROWS:
        cells = []
        for run in runs:
            value = get(run)
            cells.append(f"{'-' if value is None else value:>{width}}")
        lines.append(f"{label:<36}" + "".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path, help="results written by python -m bench")
    print(render(parser.parse_args(argv).files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
