"""The runnable programs of examples/ (Java's main, Go's cmd/nightly-report, Node's nightly-report.mjs) as a user
runs them, and the Go sources as `gofmt` and `go vet` see them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from tests.polyglot.conftest import DRIVERS, EXAMPLES, Program, bearer, go_env, java_command, node_command, require
from tests.support.servers import LiveServer, free_port


def test_three_nodes_in_three_languages_one_runs_the_job(
    java_classes: Path, go_build: Path, poly_server: LiveServer
) -> None:
    """Java, then Go, then Node start the nightly report: Java takes the lock (and keeps it 5 minutes), the others
    skip quietly with exit code 0."""
    java = Program("java", java_command(java_classes, "SchedLock"), cwd=java_classes)
    go = Program("go", [str(go_build / "nightly-report")], cwd=go_build)
    node = Program("node", [*node_command(), str(EXAMPLES / "node" / "nightly-report.mjs")], cwd=EXAMPLES / "node")

    ran = java.execute("nightly-report", "PT14M", "PT5M", url=poly_server.url)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("running nightly-report with fencing token ") and ran.stdout.endswith("EXECUTED\n")
    skipped_go = go.execute(url=poly_server.url)
    assert (skipped_go.returncode, skipped_go.stdout) == (0, "skipped: another node holds nightly-report\n")
    skipped_node = node.execute(url=poly_server.url)
    assert skipped_node.returncode == 0 and skipped_node.stdout.endswith("skipped: held\n")

    row = httpx.get(f"{poly_server.url}/v1/locks/nightly-report", headers=bearer()).json()
    assert row["held"] is True and row["locked_by"].startswith("java on ")
    assert f"fencing token {row['fencing_token']}\n" in ran.stdout


def test_the_runnable_examples_exit_69_when_the_service_is_down(java_classes: Path, go_build: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    java = Program("java", java_command(java_classes, "SchedLock"), cwd=java_classes)
    go = Program("go", [str(go_build / "nightly-report")], cwd=go_build)
    node = Program("node", [*node_command(), str(EXAMPLES / "node" / "nightly-report.mjs")], cwd=EXAMPLES / "node")
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
