"""The benchmark harness works end to end (python -m bench --quick). Nothing here is about speed."""

from __future__ import annotations

import asyncio
import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg

from bench import about, compare, dbcpu
from bench.__main__ import _parser
from bench.about import redact_url
from bench.loadgen import Load, parse_samples
from bench.stats import Phase, combine, latency_summary, percentile, pooled
from bench.summary import what_waits
from bench.targets import evaluate
from tests.support.pgcluster import PgCluster

ROOT = Path(__file__).parents[3]


def _latency(figure: dict[str, Any]) -> None:
    assert figure["count"] > 0
    values = [figure["p50_ms"], figure["p90_ms"], figure["p99_ms"], figure["max_ms"]]
    assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values), figure
    assert values == sorted(values), figure


def _run_figures(run: dict[str, Any], *, contended: bool) -> None:
    assert run["cycles"] > 0 and run["cycles_per_s"] > 0
    assert run["errors"] == 0, run["counts"]
    _latency(run["acquire"])
    _latency(run["release"])
    assert run["loadgen_cpu_s"] >= 0
    if not contended:
        assert run["held_fraction"] == 0


def test_quick_benchmark_produces_every_figure(database_url: str, tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--database-url", database_url, "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(output.read_text())

    for variant in ("uncontended", "contended"):
        figures = data["throughput"][variant]
        for side in ("http", "direct", "etcd"):
            assert len(figures[side]["runs"]) == data["config"]["repeat"] == 1
            _run_figures(figures[side]["runs"][0], contended=variant == "contended")
            assert figures[side]["cycles_per_s"]["median"] > 0
            # Each side's server-side CPU per cycle: server + Postgres, Postgres, etcd.
            assert figures[side]["cpu_us_per_cycle"]["median"] > 0
        assert 0 < figures["http"]["db_cpu_us_per_cycle"]["median"] < figures["http"]["cpu_us_per_cycle"]["median"]
        assert figures["direct"]["db_cpu_us_per_cycle"] == figures["direct"]["cpu_us_per_cycle"]
        assert figures["etcd"]["db_cpu_us_per_cycle"] is None
        assert figures["ratio"]["of_medians"] > 0 and figures["ratio_etcd"]["of_medians"] > 0
    # Two clients fighting over two names: some acquires must have found the lock held, on both services.
    for side in ("http", "etcd"):
        assert data["throughput"]["contended"][side]["runs"][0]["counts"]["acq_held"] > 0
    etcd = data["peers"]["etcd"]
    assert etcd["version"].startswith("etcd 3.") and etcd["lease"] == "exact" and etcd["rss_mb_max"] > 1
    assert not Path(etcd["data_dir"]).exists()  # stopped and removed

    for side in ("http", "direct"):
        _run_figures(data["latency"][side], contended=False)
        _run_figures(data["latency"]["low"][side], contended=False)  # one client, paced
    # The low-load sides take turns (--quick: 2 each), every turn's p50 recorded, the figures over all of them.
    assert data["latency"]["low"]["turns"] == 2
    for side in ("http", "direct"):
        low = data["latency"]["low"][side]
        assert len(low["turn_acquire_p50_ms"]) == 2 and all(p > 0 for p in low["turn_acquire_p50_ms"])
        assert low["acquire"]["count"] == low["counts"]["acq_ok"] + low["counts"].get("acq_held", 0)
    gap = data["latency"]["low"]["http"]["acquire"]["p50_ms"] - data["latency"]["low"]["direct"]["acquire"]["p50_ms"]
    assert data["targets"]["latency_low_p50_gap_ms"]["value"] == round(gap, 3)
    # The floor: the bare servers (bench.hop) in the same turns, every acquire and release answered, their CPU
    # measured, their RSS not taken for the server's; the target carries both hops' p50.
    for mode in ("raw", "uvicorn"):
        hop = data["latency"]["low"][f"hop_{mode}"]
        _run_figures(hop, contended=False)
        assert len(hop["turn_acquire_p50_ms"]) == 2 and hop["counts"]["acq_ok"] == hop["acquire"]["count"] > 0
        assert hop["counts"]["rel_ok"] > 0 and hop["server_cpu_s"] is not None and hop["server_rss_mb"] is None
        assert data["targets"]["latency_low_p50_gap_ms"]["floor"][mode] == hop["acquire"]["p50_ms"]
    assert "bare hop (httptools)" in result.stdout and "the floor, a bare hop:" in result.stdout
    for page in ("first_page", "prefix_page", "held_page"):
        assert data["list"][page]["errors"] == 0
        _latency(data["list"][page]["get"])
    assert data["table_rows"] >= data["config"]["list_rows"]

    # Scaling: one process, `serve --workers 2` and two replicas on the table (the load split), in turns.
    for variant in ("uncontended", "contended"):
        scaling = data["scaling"][variant]
        for side in ("one", "workers", "replicas"):
            (run,) = scaling[side]["runs"]
            _run_figures(run, contended=variant == "contended")  # uncontended: the replicas' names are disjoint
            assert 0 < run["db_cpu_us_per_cycle"] < run["cpu_us_per_cycle"] and run["machine_cores_busy"] > 0
        assert scaling["ratio_workers"]["of_medians"] > 0 and scaling["ratio_replicas"]["of_medians"] > 0
        # Two servers' trees: a supervisor and two workers, or two processes, hold more memory than one.
        for side in ("workers", "replicas"):
            assert scaling[side]["runs"][0]["server_rss_mb"] > scaling["one"]["runs"][0]["server_rss_mb"]
    assert data["scaling"]["contended"]["replicas"]["runs"][0]["counts"]["acq_held"] > 0
    assert data["scaling"]["seconds"] > 6 * data["config"]["seconds"]
    for label in ("workers-2", "replica-2"):  # each served requests
        assert "schedlock.access" in output.with_suffix(f".{label}.server.log").read_text()

    assert 10 < data["server_rss_mb_idle"] <= data["server_rss_mb_max"]
    assert set(data["targets"]) == {
        "throughput_ratio",
        "etcd_ratio_uncontended",
        "etcd_ratio_contended",
        "cpu_per_cycle_vs_etcd",
        "machine_cores_busy",
        "latency_acquire_p99_ms",
        "latency_low_p50_gap_ms",
        "list_first_page_p99_ms",
        "server_rss_mb",
        "scaling_workers",
        "scaling_replicas",
    }
    targets = data["targets"].values()
    assert all(t["value"] is not None and t["met"] in (True, False) for t in targets if t["target"] != "reported")
    for key in ("scaling_workers", "scaling_replicas"):  # reported, not judged
        assert (
            re.fullmatch(r"\d+\.\d\d / \d+\.\d\d", data["targets"][key]["value"])
            and data["targets"][key]["met"] is None
        )
    assert data["machine"]["cores"] >= 1 and data["load_generator"].startswith("wrk")
    waits = data["targets"]["machine_cores_busy"]["what_waits"]
    assert re.match(r"(the machine|the server process|round trips): ", waits) and "idle " in waits, waits

    # The started server required an API token, and every request above carried one (none counted as an error).
    assert data["server"]["auth"] == "API token (bearer) on every request"
    (entry,) = json.loads(data["server"]["env"]["SCHEDLOCK_TOKENS"])["tokens"]
    assert set(entry) == {"name", "sha256", "prefixes", "access"}  # the hash only: the secret is written nowhere
    assert "bearer" not in output.with_suffix(".server.log").read_text().lower()

    for heading in ("THROUGHPUT", "ratio HTTP / direct", "LATENCY", "LIST", "SERVER RSS", "TARGETS", "peer: etcd 3."):
        assert heading in result.stdout
    table = result.stdout.split("SCALING")[1].split("LATENCY")[0]
    for side in ("one process", "serve --workers 2", "2 replicas"):
        assert len(re.findall(re.escape(side) + r".*? +[\d,]+ +\d", table)) == 2, table  # uncontended, contended
    assert re.search(r"2 replicas \(one table\) ÷ one process.*reported +\d+\.\d\d / \d+\.\d\d", result.stdout)
    for variant in ("uncontended", "contended"):
        table = result.stdout.split(f"{variant} (")[1]
        assert re.search(r"etcd \(JSON gateway\) +[\d,]+ ", table)
        assert re.search(r"ratio schedlock / etcd +\d+\.\d\d \(per-run", table)
        assert re.search(
            r"CPU per cycle, us +schedlock \(server \+ Postgres\) [\d,]+, Postgres [\d,]+; "
            r"direct \(Postgres\) [\d,]+; etcd [\d,]+",
            table,
        )
    for target in ("schedlock ÷ etcd", "server + Postgres CPU per cycle ÷ etcd's"):
        assert re.search(re.escape(target) + r".*(met|MISSED)", result.stdout)
    side_by_side = compare.render([output, output])
    assert "uncontended: ratio HTTP/direct" in side_by_side and "contended: ratio schedlock/etcd" in side_by_side
    assert all(row.split()[-1] != "-" for row in side_by_side.splitlines()[1:]), side_by_side

    # The schema the run created is gone.
    async def schema_exists() -> bool:
        conn = await asyncpg.connect(database_url)
        try:
            schema = data["server"]["table"].split(".")[0]
            return bool(await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema))
        finally:
            await conn.close()

    assert not asyncio.run(schema_exists())


def test_percentiles_are_observed_values() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([7.0], 99) == 7.0
    assert latency_summary([1000.0, 3000.0, 2000.0]) == {
        "count": 3,
        "p50_ms": 2.0,
        "p90_ms": 3.0,
        "p99_ms": 3.0,
        "max_ms": 3.0,
    }


def test_wrk_samples_are_parsed_per_operation() -> None:
    text = "\n".join(
        [
            "summary 2000000 6 0 0 0 1 0",
            "counts 2 1 0 2 0 0 0",
            "acquire 100.0 200.5 300",
            "release 50 60",
            "get",
            "counts 0 0 0 0 0 0 0",
            "acquire",
            "release",
            "get",
        ]
    )
    phase = parse_samples(text)
    assert phase.seconds == 2.0
    assert phase.acquire_us == [100.0, 200.5, 300.0] and phase.release_us == [50.0, 60.0]
    assert phase.counts == {"acq_ok": 2, "acq_held": 1, "rel_ok": 2}
    summary = phase.summary()
    assert summary["cycles"] == 2 and summary["cycles_per_s"] == 1.0 and summary["errors"] == 0
    assert summary["held_fraction"] == round(1 / 3, 3)


def test_a_split_load_shares_its_clients_and_keeps_their_ids() -> None:
    load = Load("own", 5, 1, names=10, prefix="p-")
    assert [(part.clients, part.first_client, part.all_clients) for part in load.split(2)] == [(3, 0, 5), (2, 3, 5)]
    assert load.split(1) == [replace(load, of_clients=5)] and load.all_clients == 5


def test_phases_at_the_same_time_add_up() -> None:
    first = Phase(seconds=2.0, acquire_us=[1.0], counts={"acq_ok": 4, "rel_ok": 4}, loadgen_cpu_s=0.5, http_requests=8)
    second = Phase(seconds=2.1, acquire_us=[2.0], counts={"rel_ok": 2, "acq_held": 1}, http_requests=5)
    both = combine([first, second])
    assert (both.seconds, both.acquire_us, both.http_requests, both.loadgen_cpu_s) == (2.1, [1.0, 2.0], 13, 0.5)
    assert both.counts == {"acq_ok": 4, "rel_ok": 6, "acq_held": 1}
    assert combine([first]) is first


def test_phases_one_after_another_add_their_durations() -> None:
    first = Phase(seconds=2.0, acquire_us=[1.0], counts={"rel_ok": 4}, server_cpu_s=0.5, db_cpu_s=0.2, server_rss_mb=90)
    second = Phase(seconds=3.0, acquire_us=[2.0], counts={"rel_ok": 6}, server_cpu_s=0.25, server_rss_mb=95)
    both = pooled([first, second])
    assert (both.seconds, both.acquire_us, both.counts, both.server_rss_mb) == (5.0, [1.0, 2.0], {"rel_ok": 10}, 95)
    assert both.server_cpu_s == 0.75 and both.db_cpu_s is None  # a turn without it: unknown, not a partial sum
    assert both.summary()["cycles_per_s"] == 2.0
    assert pooled([first]) is first


def test_database_password_is_redacted() -> None:
    assert redact_url("postgresql://app:s3cret@db:5432/locks") == "postgresql://app:***@db:5432/locks"
    assert redact_url("postgresql://postgres@127.0.0.1:5432/test") == "postgresql://postgres@127.0.0.1:5432/test"


def test_without_a_peer_the_etcd_targets_are_not_applicable() -> None:
    args = _parser().parse_args(["--peers", "none", "--etcd-lease", "reuse"])
    assert (args.peers, args.etcd_lease) == ("none", "reuse")
    latency = {"http": {"acquire": {"p99_ms": 3.0}}}
    results = {"throughput": {}, "latency": latency, "list": {"first_page": {"get": {"p99_ms": 4.0}}}}
    targets = evaluate({**results, "server_rss_mb_max": 90.0, "table_rows": 100_000}, 32, 500.0, "exact")
    for key in ("etcd_ratio_uncontended", "etcd_ratio_contended", "cpu_per_cycle_vs_etcd"):
        assert targets[key]["value"] is None and targets[key]["met"] is None
    assert targets["server_rss_mb"]["met"] is True and targets["latency_acquire_p99_ms"]["met"] is True


def test_the_cpu_target_needs_the_servers_postgres_backends() -> None:
    def figures(db: float | None) -> dict[str, Any]:
        http = {"cpu_us_per_cycle": {"median": 900.0}, "db_cpu_us_per_cycle": {"median": db}}
        return {"uncontended": {"http": http, "etcd": {"cpu_us_per_cycle": {"median": 1000.0}}}}

    latency = {"http": {"acquire": {"p99_ms": 3.0}}}
    results = {"latency": latency, "list": {"first_page": {"get": {"p99_ms": 4.0}}}, "server_rss_mb_max": 90.0}
    results["table_rows"] = 100_000
    seen = evaluate({**results, "throughput": figures(400.0)}, 32, 500.0, "reuse")["cpu_per_cycle_vs_etcd"]
    assert (seen["value"], seen["met"]) == (0.9, True)
    # The server's CPU alone (its backends not found) is not "server + Postgres": not measured, not met.
    unseen = evaluate({**results, "throughput": figures(None)}, 32, 500.0, "reuse")["cpu_per_cycle_vs_etcd"]
    assert (unseen["value"], unseen["met"]) == (None, None)


_HOLD_A_CONNECTION = """
import asyncio, socket, sys
import asyncpg
async def main():
    listening = socket.create_server(("127.0.0.1", 0))  # a TCP socket too, as a server has: its port matches no backend
    conn = await asyncpg.connect(host=sys.argv[1], port=int(sys.argv[2]), user="postgres", database="postgres")
    print(await conn.fetchval("SELECT pg_backend_pid()"), flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def test_the_backends_of_a_client_on_a_unix_socket_are_found() -> None:
    # The embedded cluster (the benchmark's default database) listens on a Unix socket only: a server's backends
    # were not found there, and "server + Postgres" was the server alone.
    cluster = PgCluster()
    cluster.start()
    child = None
    try:
        args = [sys.executable, "-c", _HOLD_A_CONNECTION, str(cluster.data), str(cluster.port)]
        child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        backend = int(child.stdout.readline())
        assert dbcpu.backends_of(cluster.url, child.pid) == [backend]
        assert dbcpu.cpu_of([backend])[backend] >= 0
    finally:
        if child is not None:
            child.kill()
            child.wait()
            assert child.stdout is not None
            child.stdout.close()
        cluster.destroy()


def _side(machine: float, server: float, postgres: float = 0.3, loadgen: float = 0.1) -> dict[str, Any]:
    figures = {
        "machine_cores_busy": machine,
        "server_cores_busy": server,
        "postgres_cores_busy": postgres,
        "loadgen_cores_busy": loadgen,
    }
    return {key: {"median": value, "min": value, "max": value} for key, value in figures.items()}


def _waits(side: dict[str, Any], cores: int, processes: int = 1) -> str:
    text = what_waits(side, cores, processes)
    assert text is not None
    return text


def test_what_waits_names_the_machine_the_server_or_round_trips() -> None:
    assert _waits(_side(1.95, 0.9), 2).startswith("the machine: every core busy (server 0.90, Postgres 0.30")
    server = _waits(_side(1.40, 0.97), 2)
    assert server.startswith("the server process: it kept 0.97 of a core busy") and "idle 0.60 of 2 cores" in server
    assert _waits(_side(1.60, 1.8), 2, processes=2).startswith("the server's 2 processes: they kept 1.80 of 2")
    assert _waits(_side(1.60, 1.2), 2, processes=2).startswith("round trips: nothing was saturated")
    assert _waits(_side(1.20, 0.6), 2).startswith("round trips")
    assert what_waits({}, 2) is None


def test_a_missed_cores_target_says_what_waits() -> None:
    throughput = {"uncontended": {"http": _side(1.30, 0.96)}}
    latency = {"http": {"acquire": {"p99_ms": 3.0}}}
    results = {
        "throughput": throughput,
        "latency": latency,
        "list": {"first_page": {"get": {"p99_ms": 4.0}}},
        "machine": {"cores": 2},
        "config": {"server_env": {}},
    }
    cores = evaluate(results, 32, 500.0, "reuse")["machine_cores_busy"]
    assert cores["met"] is False and cores["what_waits"].startswith("the server process: it kept 0.96")
    results["config"] = {"server_env": {"SCHEDLOCK_WORKERS": "2"}}
    cores = evaluate(results, 32, 500.0, "reuse")["machine_cores_busy"]
    assert cores["what_waits"].startswith("round trips")  # two processes at 0.96 of a core are not saturated


def test_a_run_is_marked_uncommitted_for_edits_to_what_it_measures_only(tmp_path: Path) -> None:
    """Docs and tests edited beside a run change none of its figures; the server's or the benchmark's code does."""

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True, capture_output=True
        )

    git("init", "-q")
    for path in ("app/x.py", "bench/y.py", "docs/z.md", "tests/t.py", "pyproject.toml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("1\n")
    git("add", "-A")
    git("commit", "-q", "-m", "c")
    assert about.code(tmp_path)["dirty"] is False
    (tmp_path / "docs/z.md").write_text("2\n")
    (tmp_path / "tests/t.py").write_text("2\n")
    assert about.code(tmp_path)["dirty"] is False
    (tmp_path / "bench/new.py").write_text("2\n")  # a file git does not know yet counts too
    assert about.code(tmp_path)["dirty"] is True
    (tmp_path / "bench/new.py").unlink()
    for path in ("app/x.py", "pyproject.toml"):
        (tmp_path / path).write_text("2\n")
        assert about.code(tmp_path)["dirty"] is True, path
        git("checkout", "-q", "--", path)
    measured = about.code(tmp_path)
    assert measured["dirty"] is False and measured["commit"]
