"""The packages users install, built and installed each ecosystem's own way: the Python distributions (`schedlock`,
`schedlock-server`) as wheel and sdist that pass `twine check` and install from the wheel into a clean virtualenv;
the node-cron adapter packed by `npm pack` (types, `exports`, `engines`, a README) and installed from the tarball
into a clean project; the ShedLock provider's `mvn verify` (jar, sources, javadoc) with a POM Maven Central takes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
import venv
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from tests.support.polyglot import ROOT, build, node_command, require
from tests.support.schedulers_js_go import build_node_cron
from tests.support.servers import LiveServer

pytestmark = pytest.mark.system  # builds, a virtualenv from PyPI, npm and Maven

POM = "{http://maven.apache.org/POM/4.0.0}"


def python_sources(tmp: Path) -> dict[str, Path]:
    """Copies of the two projects' sources (a build writes build/ and *.egg-info beside them)."""
    server, client = tmp / "server", tmp / "client"
    server.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, server / name)
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    shutil.copytree(ROOT / "app", server / "app", ignore=ignore)
    shutil.copytree(ROOT / "client", client, ignore=ignore)
    return {"schedlock-server": server, "schedlock": client}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels and sdists of both distributions, built as `python -m build` builds them for PyPI."""
    tmp = tmp_path_factory.mktemp("dists")
    out = tmp / "dist"
    for source in python_sources(tmp).values():
        command = [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out)]
        build([*command, str(source)], cwd=tmp)
    return out


def test_wheels_and_sdists_pass_twine_check(dists: Path) -> None:
    files = sorted(p.name for p in dists.iterdir())
    version = __import__("schedlock").__version__
    assert files == [
        f"schedlock-{version}-py3-none-any.whl",
        f"schedlock-{version}.tar.gz",
        f"schedlock_server-{version}-py3-none-any.whl",
        f"schedlock_server-{version}.tar.gz",
    ]
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists.iterdir())],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0 and checked.stdout.count("PASSED") == 4, checked.stdout + checked.stderr
    with zipfile.ZipFile(dists / f"schedlock-{version}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
    assert "schedlock/py.typed" in names and not any(n.startswith(("app/", "tests/")) for n in names)
    with tarfile.open(dists / f"schedlock_server-{version}.tar.gz") as sdist:
        members = sdist.getnames()
    assert any(m.endswith("app/db/migrations/env.py") for m in members)


def test_the_wheels_install_into_a_clean_virtualenv(dists: Path, live_server: LiveServer, tmp_path: Path) -> None:
    """Each wheel and its dependencies (the versions requirements.lock pins) into a virtualenv of its own, the server's
    first and alone (what it needs must not arrive with the client): the server's command writes the OpenAPI document
    the repository holds, then the client's runs a job under a lock."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDLOCK_", "PYTHON", "VIRTUAL_ENV"))}
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
               str(ROOT / "requirements.lock")]  # fmt: skip
    (server_wheel,) = dists.glob("schedlock_server-*.whl")
    build([*install, str(server_wheel)], cwd=tmp_path)
    alone = subprocess.run([str(env_dir / "bin" / "schedlock-server"), "openapi"], env=env, cwd="/",
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert alone.returncode == 0, alone.stderr  # every module of the app imports with the server's dependencies
    (client_wheel,) = dists.glob("schedlock-*.whl")
    build([*install, str(client_wheel)], cwd=tmp_path)
    env["SCHEDLOCK_URL"] = live_server.url
    name = f"wheel-{uuid.uuid4().hex[:8]}"
    command = [str(env_dir / "bin" / "schedlock"), "run", "--name", name, "--at-most", "1m", "--", "echo", "ran"]
    ran = subprocess.run(command, env=env, cwd="/", capture_output=True, text=True, timeout=60, check=False)
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    where = subprocess.run([str(python), "-c", "import app, schedlock; print(app.__file__, schedlock.__file__)"],
                           env=env, cwd="/", capture_output=True, text=True, check=True)  # fmt: skip
    assert all(path.startswith(str(env_dir)) for path in where.stdout.split()), where.stdout
    document = subprocess.run([str(env_dir / "bin" / "schedlock-server"), "openapi"], env=env, cwd="/",
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert document.returncode == 0, document.stderr
    assert json.loads(document.stdout) == json.loads((ROOT / "openapi" / "openapi.json").read_text())


def test_the_node_cron_adapter_packs_and_installs_from_its_tarball(tmp_path: Path) -> None:
    source = tmp_path / "source"
    build_node_cron(source)
    shutil.copy(ROOT / "integrations/node-cron/index.d.mts", source)
    shutil.copy(ROOT / "integrations/node-cron/README.md", source)
    npm = require("npm", "npm")
    # The committed types are tsc's from the JSDoc of index.mjs (`npm run types`).
    committed = (source / "index.d.mts").read_text()
    build([npm, "run", "--silent", "types"], cwd=source)
    assert (source / "index.d.mts").read_text() == committed, "index.d.mts is stale: run `npm run types`"
    packed = subprocess.run([npm, "pack", "--json", "--pack-destination", str(tmp_path)], cwd=source,
                            capture_output=True, text=True, check=True)  # fmt: skip
    (report,) = json.loads(packed.stdout)
    assert sorted(f["path"] for f in report["files"]) == ["README.md", "index.d.mts", "index.mjs", "package.json"]
    manifest = json.loads((source / "package.json").read_text())
    assert manifest["exports"] == {".": {"types": "./index.d.mts", "default": "./index.mjs"}}
    assert manifest["engines"] == {"node": ">=20"} and manifest["repository"]["directory"] == "integrations/node-cron"

    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "user", "private": True, "type": "module"}))
    tarball = tmp_path / report["filename"]
    build([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "node-cron@4", str(tarball)], cwd=project)
    (project / "check.mjs").write_text(
        "import { SchedlockCoordinator, parseKey } from 'schedlock-node-cron';\n"
        "const c = new SchedlockCoordinator({ url: 'http://127.0.0.1:1' });\n"
        "console.log(typeof c.shouldRun, parseKey('report:2026-11-30T03:00:00.000Z').tick);\n"
    )
    ran = subprocess.run([*node_command(), "check.mjs"], cwd=project, capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "function 2026-11-30T03:00:00.000Z\n"), ran.stderr
    installed = project / "node_modules" / "schedlock-node-cron"
    assert (installed / "index.d.mts").exists() and (installed / "README.md").exists()


def test_the_shedlock_provider_verifies_with_sources_javadoc_and_a_central_pom(tmp_path: Path) -> None:
    source = tmp_path / "provider"
    shutil.copytree(ROOT / "integrations" / "java", source, ignore=shutil.ignore_patterns("target"))
    mvn = require("mvn", "maven")
    env = {**os.environ, "MAVEN_OPTS": f"{os.environ.get('MAVEN_OPTS', '')} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    build(["nice", "-n", "10", mvn, "-B", "-q", "verify"], cwd=source, env=env)
    pom = ET.parse(source / "pom.xml").getroot()
    artifact, version = pom.findtext(f"{POM}artifactId"), pom.findtext(f"{POM}version")
    jars = sorted(p.name for p in (source / "target").glob("*.jar"))
    assert jars == [
        f"{artifact}-{version}-javadoc.jar",
        f"{artifact}-{version}-sources.jar",
        f"{artifact}-{version}.jar",
    ]
    with zipfile.ZipFile(source / "target" / f"{artifact}-{version}-javadoc.jar") as javadoc:
        assert any(n.endswith("dev/schedlock/shedlock/SchedlockLockProvider.html") for n in javadoc.namelist())
    # What Central's validation requires of the POM besides coordinates: name, description, url, licence, developer,
    # SCM (and signatures, which `-P release` adds).
    for path in ("name", "description", "url", "licenses/license/name", "licenses/license/url",
                 "developers/developer/name", "scm/connection", "scm/developerConnection", "scm/url"):  # fmt: skip
        assert pom.findtext("/".join(f"{POM}{part}" for part in path.split("/"))), path
    profiles = [p.findtext(f"{POM}id") for p in pom.iter(f"{POM}profile")]
    assert "release" in profiles and "maven-gpg-plugin" in ET.tostring(pom, encoding="unicode")
