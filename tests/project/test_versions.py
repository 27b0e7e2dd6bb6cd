"""One version for every package: the server's and the client's distributions and their ``__version__``, the Helm
chart, the Go module (the binary's --version), the node-cron adapter (npm), the ShedLock provider (Maven) and the
builds that use it, the OpenAPI document; CHANGELOG.md has a section for it; and scripts/version.py bumps them all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

import app
import schedlock

ROOT = Path(__file__).parents[2]
POM = "{http://maven.apache.org/POM/4.0.0}"


#: The files scripts/version.py writes.
VERSIONED = [
    "pyproject.toml",
    "client/pyproject.toml",
    "helm/schedlock/Chart.yaml",
    "integrations/go/schedlock/version.go",
    "integrations/node-cron/package.json",
    "integrations/node-cron/package-lock.json",
    "integrations/java/pom.xml",
    "integrations/java/README.md",
    "docs/java.md",
    "docs/node-cron.md",
    "docs/cli.md",
    "tests/system/integrations/java/boot3/pom.xml",
    "tests/system/integrations/java/shedlock7/pom.xml",
    "openapi/openapi.json",
    "CHANGELOG.md",
]


def _project_version(pyproject: Path) -> str:
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def versions(root: Path) -> dict[str, str]:
    """Every place a package's version is written, read each in its own format."""
    chart = yaml.safe_load((root / "helm/schedlock/Chart.yaml").read_text())
    package = json.loads((root / "integrations/node-cron/package.json").read_text())
    lock = json.loads((root / "integrations/node-cron/package-lock.json").read_text())
    go = re.search(r'const Version = "([^"]+)"', (root / "integrations/go/schedlock/version.go").read_text())
    assert go is not None
    found = {
        "schedlock-server": _project_version(root / "pyproject.toml"),
        "schedlock": _project_version(root / "client/pyproject.toml"),
        "chart": str(chart["version"]),
        "chart appVersion": str(chart["appVersion"]),
        "go": go.group(1),
        "npm": package["version"],
        "npm lock": lock["version"],
        "npm lock root": lock["packages"][""]["version"],
        "openapi": json.loads((root / "openapi/openapi.json").read_text())["info"]["version"],
    }
    provider = ET.parse(root / "integrations/java/pom.xml").getroot()
    found["maven"] = provider.findtext(f"{POM}version") or ""
    for build in ("boot3", "shedlock7"):
        pom = ET.parse(root / "tests/system/integrations/java" / build / "pom.xml").getroot()
        (dependency,) = [
            d for d in pom.iter(f"{POM}dependency") if d.findtext(f"{POM}artifactId") == "schedlock-shedlock-provider"
        ]
        found[f"maven in {build}"] = dependency.findtext(f"{POM}version") or ""
    return found


def test_every_package_carries_one_version() -> None:
    found = versions(ROOT)
    server = found["schedlock-server"]
    assert found == dict.fromkeys(found, server)
    assert app.__version__ == server
    assert schedlock.__version__ == server


def test_the_changelog_has_a_section_for_the_version() -> None:
    version = _project_version(ROOT / "pyproject.toml")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.index("## [Unreleased]") < changelog.index(f"## [{version}] - ")


def test_scripts_version_bumps_every_package_and_opens_a_changelog_section(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    for name in VERSIONED:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    command = [sys.executable, str(ROOT / "scripts/version.py"), "9.8.7", "--date", "2031-02-03", "--root", str(copy)]
    subprocess.run(command, check=True, capture_output=True)
    assert set(versions(copy).values()) == {"9.8.7"}
    changelog = (copy / "CHANGELOG.md").read_text()
    assert changelog.index("## [Unreleased]") < changelog.index("## [9.8.7] - 2031-02-03") < changelog.index("### ")
    assert "<version>9.8.7</version>" in (copy / "docs/java.md").read_text()
    assert "schedlock-shedlock-provider:9.8.7" in (copy / "docs/cli.md").read_text()
