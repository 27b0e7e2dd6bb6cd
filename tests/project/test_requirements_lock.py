"""requirements.lock still satisfies pyproject.toml (server and client), and the image and the suite install with it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[2]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*(?:;|#|$)")


def _locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _requirements(pyproject: Path) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    texts = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        texts += extra
    return [Requirement(text) for text in texts]


def test_every_requirement_is_locked_at_a_version_it_allows() -> None:
    locked = _locked()
    problems = []
    for pyproject in (ROOT / "pyproject.toml", ROOT / "client/pyproject.toml"):
        for requirement in _requirements(pyproject):
            pinned = locked.get(canonicalize_name(requirement.name))
            if pinned is None:
                problems.append(f"{requirement} ({pyproject.parent.name}): not in requirements.lock")
            elif not requirement.specifier.contains(pinned, prereleases=True):
                problems.append(f"{requirement} ({pyproject.parent.name}): locked at {pinned}")
    assert not problems, "run ./scripts/lock:\n" + "\n".join(problems)


def test_the_suite_runs_the_locked_versions() -> None:
    """What the suite runs is what is locked (scripts/test installs with the lock as constraints; its second run,
    against the newest releases, leaves this test out)."""
    locked = _locked()
    for name in ("fastapi", "starlette", "uvicorn", "httptools", "uvloop", "asyncpg", "pydantic"):
        assert version(name) == locked[name], name


def test_the_image_and_the_suite_install_with_the_lock() -> None:
    assert "--constraint requirements.lock" in (ROOT / "Dockerfile").read_text()
    assert "-c requirements.lock" in (ROOT / "scripts/test").read_text()
