"""The runnable programs of examples/ (Java's main, Go's cmd/nightly-report, Node's nightly-report.mjs) as a user
runs them, and the Go sources as `gofmt` and `go vet` see them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx

from tests.support.polyglot import DRIVERS, EXAMPLES, Program, bearer, go_env, go_vars, node_command, require
from tests.support.servers import LiveServer, free_port


def documented(go_build: Path) -> tuple[Program, Program, Program]:
    """Each language's runnable example, started as docs/clients.md says: Java's single-file source launch,
    `go run`, `node`."""
    java = Program("java", [require("java", "openjdk-17-jdk-headless"), "SchedLock.java"], cwd=EXAMPLES / "java")
    go = Program("go", [require("go", "golang-go"), "run", "./cmd/nightly-report"], EXAMPLES / "go", go_vars(go_build))
    node = Program("node", [*node_command(), "nightly-report.mjs"], cwd=EXAMPLES / "node")
    return java, go, node


def test_three_nodes_in_three_languages_one_runs_the_job(go_build: Path, poly_server: LiveServer) -> None:
    """Java, then Go, then Node start the nightly report: Java takes the lock (and keeps it 5 minutes), the others
    skip quietly with exit code 0."""
    java, go, node = documented(go_build)
    ran = java.execute("nightly-report", "PT14M", "PT5M", url=poly_server.url)
    assert ran.returncode == 0, ran.stderr
    assert re.fullmatch(r"running nightly-report with fencing token \d+\nEXECUTED\n", ran.stdout), ran.stdout
    skipped_go = go.execute(url=poly_server.url)
    assert (skipped_go.returncode, skipped_go.stdout) == (0, "skipped: another node holds nightly-report\n")
    skipped_node = node.execute(url=poly_server.url)
    assert skipped_node.returncode == 0 and skipped_node.stdout.endswith("skipped: held\n")

    row = httpx.get(f"{poly_server.url}/v1/locks/nightly-report", headers=bearer()).json()
    assert row["held"] is True and row["locked_by"].startswith("java on ")
    assert f"fencing token {row['fencing_token']}\n" in ran.stdout


def test_the_runnable_examples_exit_69_when_the_service_is_down(go_build: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    java, _, node = documented(go_build)
    go = Program("go", [str(go_build / "nightly-report")], cwd=go_build)  # `go run` turns every failure into 1
    for done in (java.execute("nightly-report", url=url), go.execute(url=url), node.execute(url=url)):
        assert done.returncode == 69, done
        assert "unavailable" in done.stdout + done.stderr


def test_go_sources_are_gofmt_and_vet_clean(go_build: Path) -> None:
    unformatted = subprocess.run(
        [require("gofmt", "golang-go"), "-l", str(EXAMPLES / "go"), str(DRIVERS / "go")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert unformatted == ""
    for module in (EXAMPLES / "go", DRIVERS / "go"):
        vet = subprocess.run(
            [require("go", "golang-go"), "vet", "./..."],
            cwd=module,
            env=go_env(go_build),  # the build's cache: vet reuses what it compiled
            capture_output=True,
            text=True,
            check=False,
        )
        assert vet.returncode == 0, vet.stderr
