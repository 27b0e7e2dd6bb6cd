"""Every example in the docs runs, as written: README.md, docs/*.md and client/README.md.

- ```python blocks run one by one, each in a fresh namespace (a block that needs another one is a fragment: a bug),
  with SCHEDLOCK_URL pointing at a live server.
- ```sh blocks run with bash, as pasted; the only change is that ``localhost:8000`` becomes the live server (or, for
  a block that starts a server of its own, a free port it gets as SCHEDLOCK_PORT). EXCLUDED lists the few blocks
  that cannot run by their nature, with the reason.
- A ``# → ...`` comment is output the code before it must print; ``…`` stands for any text on the line. A block
  that shows output shows all of it, in order.
- ```java, ```go and ```js blocks must be verbatim excerpts of files the suite builds and runs: examples/, the ShedLock
  provider in integrations/ and the programs that run it in tests/system/integrations/java/.
- ```toml and ```json token configurations (tokens, issuers, bindings) must load; a ```json log line must have
  exactly the fields the server logs (docs/cli.md's ```json are the CLI's output shapes, which
  tests/system/cli_conformance checks); ```promql may name only metrics the server exports; ```text is prose in a box.

Each page's examples run in the page's order against a server on a table of the page's own, so their outputs depend
neither on what other tests did nor on the order pytest runs the pages in.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.config import parse_config
from app.settings import Settings
from tests.support.api import seconds
from tests.support.apps import migrated_table
from tests.support.patience import SETTLE
from tests.support.servers import LiveServer, free_port, start_server, stop_server

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "client" / "README.md"]
#: (file, a line of the block) -> why it cannot run in a test. Keep this short: everything else runs.
EXCLUDED = {
    ("README.md", "./scripts/test"): "sets up the venv and runs this very suite; `serve` on the embedded database "
    "runs in tests/system/test_embedded.py",
    ("docs/cli.md", "0 2 * * *"): "a crontab line, not a shell command; its `schedlock run` runs in docs/cli.md's "
    "next block",
    (
        "docs/deploy.md",
        "docker build",
    ): "needs a Docker daemon and a registry; tests/system/deploy/test_docker.py checks the Dockerfile",
    ("docs/deploy.md", "helm install"): "needs a Kubernetes cluster; tests/system/deploy/test_helm.py renders and "
    "validates the chart",
    ("docs/performance.md", "python -m bench.compare"): "the ~4-minute benchmark, and scripts that run for minutes; "
    "tests/system/bench/test_bench.py runs the benchmark with --quick",
    ("docs/performance.md", "python -m bench.servers"): "two servers side by side for ~4 minutes; "
    "tests/system/bench/test_servers.py runs the harness for two rounds of 1 s",
    ("docs/performance-journal.md", "python -m bench.servers"): "the command of a dated run, as it ran; "
    "tests/system/bench/test_servers.py runs the harness for two rounds of 1 s",
    ("docs/cors.md", "Access-Control-Request-Method"): "needs a server started with the block above's setting; "
    "tests/api/test_origin.py runs the two against one",
    ("docs/high-availability.md", "helm install"): "needs a Kubernetes cluster; tests/docs/test_ha.py renders the "
    "chart with these values",
    ("docs/dashboard.md", "helm upgrade"): "needs a Kubernetes cluster; tests/system/deploy/test_helm_monitoring.py "
    "renders the chart with the dashboard and the alerts on",
}
#: Blocks a test of their own runs, with more to check.
DEDICATED = {("README.md", "curl -s"): "test_the_readme_curl_session_runs_as_pasted"}
OUTPUT = re.compile(r"#\s→\s?(.*)$")
#: Languages whose snippets quote a file of examples/ or integrations/ (the scheduler adapters, whose examples
#: tests/system/integrations/ runs) that the suite builds and runs: each block must be a verbatim excerpt of one, so the
#: quoted code is the tested code.
QUOTED = {"java": (".java",), "go": (".go",), "js": (".mjs", ".js"), "javascript": (".mjs", ".js")}
#: ```sql and ```yaml (docs/high-availability.md's table setting, role and CloudNativePG Cluster): tests/docs/test_ha.py
#: and tests/system/ha/test_patroni.py; the workload identity yaml of docs/deploy.md and docs/auth.md:
#: tests/system/deploy/test_helm.py and tests/system/deploy/test_helm_cronjob.py.
KNOWN_LANGUAGES = {"python", "sh", "toml", "json", "promql", "text", "sql", "yaml", *QUOTED}
#: Where the quoted files are: each is built and run by the suite (tests/system/polyglot/, tests/system/integrations/).
QUOTED_ROOTS = [ROOT / "examples", ROOT / "integrations", ROOT / "tests" / "system" / "integrations" / "java"]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    code: str

    @property
    def doc(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def mentions(self, text: str) -> bool:
        return any(text in line for line in self.code.splitlines())


def blocks(language: str | None = None) -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in re.finditer(r"^```(\S*)\n(.*?)^```$", text, re.M | re.S):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path, line, match.group(1), match.group(2)))
    return [b for b in found if language is None or b.language == language]


def keyed(table: dict[tuple[str, str], str], block: Block) -> str | None:
    return next((why for (doc, line), why in table.items() if doc == block.doc and block.mentions(line)), None)


def expected_outputs(code: str) -> list[str]:
    """The ``# → `` comments as regular expressions, consecutive lines joined into one."""
    chunks: list[list[str]] = []
    previous_was_output = False
    for line in code.splitlines():
        match = OUTPUT.search(line)
        if match and previous_was_output and line.lstrip().startswith("#"):
            chunks[-1].append(match.group(1))
        elif match:
            chunks.append([match.group(1)])
        previous_was_output = bool(match) and line.lstrip().startswith("#")
    return [r"[^\n]*?".join(re.escape(part) for part in "\n".join(chunk).split("…")) for chunk in chunks]


def assert_printed(block: Block, out: str) -> None:
    """A block that shows output shows all of it: the comments, in order, account for everything it printed."""
    expected = expected_outputs(block.code)
    if expected and not re.fullmatch("".join(f"{pattern}\n?" for pattern in expected), out):
        position = 0  # say which comment fails first
        for pattern in expected:
            match = re.compile(pattern).search(out, position)
            assert match, f"{block.id}: output comment {pattern!r} is not true; printed:\n{out[position:]}"
            position = match.end()
        pytest.fail(f"{block.id}: printed more than its output comments show:\n{out}")


@contextlib.contextmanager
def server_on_a_fresh_table(database_url: str) -> Iterator[tuple[LiveServer, Settings]]:
    with migrated_table(database_url, "docs") as settings:
        server = start_server(settings)
        try:
            yield server, settings
        finally:
            stop_server(server)


@pytest.fixture(scope="module")
def docs_server(database_url: str) -> Iterator[tuple[LiveServer, Settings]]:
    with server_on_a_fresh_table(database_url) as pair:
        yield pair


def run_sh(block: Block, server: LiveServer, settings: Settings, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a sh block with bash, as pasted, stopping at the first failing command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # schedlock, schedlock-server
    address = server.url.removeprefix("http://")
    if block.mentions("schedlock-server serve"):  # a server of its own, on the same table
        port = free_port()
        address = f"127.0.0.1:{port}"
        env.update(SCHEDLOCK_PORT=str(port), SCHEDLOCK_DATABASE_URL=settings.asyncpg_dsn())
        env["SCHEDLOCK_TABLE"] = settings.table
    env["SCHEDLOCK_URL"] = f"http://{address}"
    script = cwd / "example.sh"
    script.write_text(block.code.replace("localhost:8000", address))
    process = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", str(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so whatever it left running can be stopped with it
    )
    try:
        out, err = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def assert_runs(block: Block, server: LiveServer, settings: Settings, cwd: Path) -> str:
    result = run_sh(block, server, settings, cwd)
    assert result.returncode == 0, f"{block.id} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert_printed(block, result.stdout)
    return result.stdout


def test_every_block_has_a_checker() -> None:
    unknown = [f"{b.id} ```{b.language}" for b in blocks() if b.language not in KNOWN_LANGUAGES]
    assert not unknown, f"blocks no test checks (give them a language this module runs or validates): {unknown}"


def test_the_exclusion_lists_name_real_blocks() -> None:
    for table in (EXCLUDED, DEDICATED):
        for doc, line in table:
            matching = [b for b in blocks("sh") if b.doc == doc and b.mentions(line)]
            assert len(matching) == 1, f"{doc}: {line!r} should name exactly one sh block, names {len(matching)}"


def test_the_readme_curl_session_runs_as_pasted(docs_server: tuple[LiveServer, Settings], tmp_path: Path) -> None:
    [block] = [b for b in blocks("sh") if keyed(DEDICATED, b)]
    commands = [line for line in block.code.splitlines() if not line.lstrip().startswith("#")]
    assert not any("…" in line or "<" in line for line in commands), "a placeholder where a value should be"
    assert not any(re.search(r"\bjq\b", line) for line in commands), "jq is not installed by ./scripts/test"
    out = assert_runs(block, *docs_server, tmp_path)
    # Pasted, the session reads an answer a line: each line is one JSON body (none run together).
    lease, held, extended, lock, listing, released = (json.loads(line) for line in out.splitlines())
    assert held["error"]["code"] == "lock_held" and extended["extended"] and lock["held"] and released["released"]
    assert "billing.nightly" in [item["name"] for item in listing["items"]]  # the list finds the lock taken above
    # The captured token released the lease; the at-least window given at acquisition still holds.
    assert seconds(lease["locked_at"], released["lock_until"]) == 5 * 60


def runnable(block: Block) -> bool:
    if block.language == "sh":
        return not keyed(EXCLUDED, block) and not keyed(DEDICATED, block)
    return block.language == "python"


PAGES = sorted({block.path for block in blocks() if runnable(block)})


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_the_page_examples_run_in_order(
    page: Path, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's python and sh blocks, in the page's order (a later block may build on an earlier one's locks, as a
    reader pasting them would), against a server on a table of the page's own."""
    monkeypatch.delenv("SCHEDLOCK_TOKEN", raising=False)
    with server_on_a_fresh_table(database_url) as (server, settings):
        monkeypatch.setenv("SCHEDLOCK_URL", server.url)
        for block in [b for b in blocks() if b.path == page and runnable(b)]:
            if block.language == "sh":
                assert_runs(block, server, settings, tmp_path)
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):  # each block in a fresh namespace: a fragment fails
                exec(compile(block.code, block.id, "exec"), {"__name__": "__docs__"})
            assert_printed(block, out.getvalue())


def test_quoted_snippets_are_excerpts_of_the_examples() -> None:
    for block in [b for b in blocks() if b.language in QUOTED]:
        files = [
            p
            for root in QUOTED_ROOTS
            for p in root.rglob("*")
            if p.suffix in QUOTED[block.language] and "node_modules" not in p.parts
        ]
        assert any(block.code in p.read_text() for p in files), f"{block.id} is not an excerpt of a built file"


@pytest.mark.parametrize(
    "block", blocks("toml") + [b for b in blocks("json") if '"tokens"' in b.code], ids=lambda b: b.id
)
def test_token_configuration_loads(block: Block) -> None:
    config = parse_config(block.code, block.id)
    assert config.tokens or config.issuers


def test_json_blocks_are_token_configurations_or_log_lines(docs_server: tuple[LiveServer, Settings]) -> None:
    server, _ = docs_server
    name = f"docs-{uuid.uuid4().hex[:8]}"
    for _ in range(2):  # the second answer is 409 lock_held, as in the example
        httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, timeout=10)
    deadline = time.monotonic() + SETTLE
    logged: list[dict[str, Any]] = []
    while not logged and time.monotonic() < deadline:
        lines = [json.loads(line) for line in list(server.output) if line.startswith("{")]
        logged = [line for line in lines if line.get("lock") == name and line.get("status") == 409]
        time.sleep(0.05)
    assert logged, "the server logged no access line for the 409"
    for block in blocks("json"):
        example = json.loads(block.code)
        if "tokens" in example:
            continue  # test_token_configuration_loads
        if block.doc == "docs/cli.md":
            continue  # the `schedlock --json` shapes: tests/system/cli_conformance/test_commands.py checks them
        assert example.get("logger") == "schedlock.access", f"{block.id}: a JSON block no test checks"
        assert set(example) == set(logged[0]), f"{block.id}: the server logs {sorted(logged[0])}"


def test_promql_names_only_exported_metrics(docs_server: tuple[LiveServer, Settings]) -> None:
    exported = httpx.get(f"{docs_server[0].url}/metrics", timeout=10).text
    for block in blocks("promql"):
        for metric in set(re.findall(r"\b((?:schedlock|process|python)_[a-z_]+)\b", block.code)):
            assert re.search(rf"^{metric}[{{ ]", exported, re.M), f"{block.id}: {metric} is not exported"
