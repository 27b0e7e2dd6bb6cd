"""Bump every package to one new version, in one command: the server and the client (PyPI), the chart, the Go module's
`Version` (the binary's --version), the node-cron adapter (npm), the ShedLock provider (Maven) and the builds that
depend on it, the OpenAPI document, the docs' install lines; and CHANGELOG.md's "Unreleased" becomes the release's
section. tests/project/test_versions.py checks that every package carries the same version.

    .venv/bin/python scripts/version.py 0.2.0            # today's date in the CHANGELOG
    .venv/bin/python scripts/version.py 0.2.0 --date 2027-01-15
"""

from __future__ import annotations

import argparse
import datetime
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The provider's version where a POM or an install line names it.
PROVIDER = r"<artifactId>schedlock-shedlock-provider</artifactId>\s*<version>([^<]+)</version>"
NPM_LOCK_ROOT = r'(?s)"packages": \{\s*"": \{\s*"name": "[^"]+",\s*"version": "([^"]+)"'
#: (file, pattern): the pattern's one group is the version, replaced where it matches.
PLACES: list[tuple[str, str]] = [
    ("pyproject.toml", r'(?m)^version = "([^"]+)"'),
    ("client/pyproject.toml", r'(?m)^version = "([^"]+)"'),
    ("helm/schedlock/Chart.yaml", r"(?m)^version: (\S+)"),
    ("helm/schedlock/Chart.yaml", r'(?m)^appVersion: "([^"]+)"'),
    ("integrations/go/schedlock/version.go", r'const Version = "([^"]+)"'),
    ("integrations/node-cron/package.json", r'(?m)^  "version": "([^"]+)"'),
    ("integrations/node-cron/package-lock.json", r'(?m)^  "version": "([^"]+)"'),
    ("integrations/node-cron/package-lock.json", NPM_LOCK_ROOT),
    ("integrations/java/pom.xml", PROVIDER),
    ("integrations/java/README.md", PROVIDER),
    ("integrations/java/README.md", r"schedlock-shedlock-provider-([0-9][^ ]*?)\.jar"),
    ("docs/java.md", PROVIDER),
    ("tests/system/integrations/java/boot3/pom.xml", PROVIDER),
    ("tests/system/integrations/java/shedlock7/pom.xml", PROVIDER),
    ("docs/node-cron.md", r"schedlock-node-cron-([0-9][^ ]*?)\.tgz"),
    ("docs/cli.md", r"dev\.schedlock:schedlock-shedlock-provider:(\S+)"),
    ("openapi/openapi.json", r'(?m)^    "version": "([^"]+)"$'),  # the first: info's
]  # fmt: skip


def bump(root: Path, new: str, date: str) -> None:
    for name, pattern in PLACES:
        path = root / name
        text = path.read_text()
        match = re.search(pattern, text)
        if match is None:
            raise SystemExit(f"{name}: no version where {pattern!r} looks")
        path.write_text(text[: match.start(1)] + new + text[match.end(1) :])
    changelog = root / "CHANGELOG.md"
    text = changelog.read_text()
    if "## [Unreleased]" not in text:
        raise SystemExit("CHANGELOG.md: no [Unreleased] section to release")
    changelog.write_text(text.replace("## [Unreleased]", f"## [Unreleased]\n\n## [{new}] - {date}", 1))


def main() -> None:
    parser = argparse.ArgumentParser(description="Set every package's version.")
    parser.add_argument("version", help="the new version, e.g. 0.2.0")
    parser.add_argument("--date", default=datetime.date.today().isoformat(), help="the release date (default today)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # a copy of the tree, in tests
    args = parser.parse_args()
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc)\d+)?", args.version):
        parser.error(f"not a version: {args.version!r}")
    bump(args.root, args.version, args.date)


if __name__ == "__main__":
    main()
