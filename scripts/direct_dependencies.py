"""The direct dependencies of the server and the client, one requirement a line (name and extras, no version), for
``pip install --upgrade``; with ``--versions``, each one's installed version. scripts/test uses both."""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def direct() -> list[Requirement]:
    found = []
    for pyproject in (ROOT / "pyproject.toml", ROOT / "client" / "pyproject.toml"):
        found += [Requirement(text) for text in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    return found


if __name__ == "__main__":
    for requirement in direct():
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        if "--versions" in sys.argv[1:]:
            print(f"  {requirement.name}=={version(requirement.name)}")
        else:
            print(f"{requirement.name}{extras}")
