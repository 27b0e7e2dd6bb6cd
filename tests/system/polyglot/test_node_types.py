"""The OpenAPI document drives a generator: TypeScript types made from openapi/openapi.json by openapi-typescript
type-check the Node client (examples/node/schedlock.mjs: plain JavaScript, typed in JSDoc against those types, so
it stays a file to copy that needs no build step). The tools come from the npm registry at the versions
examples/node/package-lock.json pins, installed into a temporary folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.polyglot import EXAMPLES, ROOT, build, require

NODE = EXAMPLES / "node"
CHECKED = ["schedlock.mjs", "nightly-report.mjs", "tsconfig.json"]


@pytest.fixture(scope="session")
def node_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with node_modules/ holding openapi-typescript, typescript and @types/node, as locked."""
    folder = tmp_path_factory.mktemp("node-tools")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(NODE / name, folder / name)
    build([require("npm", "npm"), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=folder)
    return folder


def generate(tools: Path, output: Path) -> str:
    command = [str(tools / "node_modules/.bin/openapi-typescript"), str(ROOT / "openapi/openapi.json"), "--output"]
    build([*command, str(output)], cwd=tools)
    return output.read_text()


def type_check(tools: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    tsc = [str(tools / "node_modules/.bin/tsc"), "--project", str(folder / "tsconfig.json")]
    # @types/node from the tools' folder: the checked folder has no node_modules of its own
    command = [*tsc, "--typeRoots", str(tools / "node_modules/@types")]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False)


def checked_copy(tools: Path, folder: Path) -> Path:
    """The Node client and its tsconfig beside types freshly generated from the committed OpenAPI document."""
    folder.mkdir()
    for name in CHECKED:
        shutil.copy(NODE / name, folder / name)
    generate(tools, folder / "schedlock-api.d.ts")
    return folder


def test_the_committed_types_are_what_the_generator_makes(node_tools: Path, tmp_path: Path) -> None:
    fresh = generate(node_tools, tmp_path / "schedlock-api.d.ts")
    assert (NODE / "schedlock-api.d.ts").read_text() == fresh, (
        "examples/node/schedlock-api.d.ts is stale: run `npm install && npm run types` in examples/node"
    )


def test_the_node_client_type_checks_against_the_generated_types(node_tools: Path, tmp_path: Path) -> None:
    folder = checked_copy(node_tools, tmp_path / "check")
    done = type_check(node_tools, folder)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_type_check_catches_a_field_the_api_does_not_have(node_tools: Path, tmp_path: Path) -> None:
    """The witness that the check is not vacuous (types resolving to `any` would pass anything)."""
    folder = checked_copy(node_tools, tmp_path / "broken")
    client = folder / "schedlock.mjs"
    source = client.read_text()
    assert "acquired.fencing_token" in source and "held.locked_by" in source
    client.write_text(
        source.replace("acquired.fencing_token", "acquired.fencing_tokn").replace("held.locked_by", "held.holder")
    )
    done = type_check(node_tools, folder)
    assert done.returncode != 0
    assert "Property 'fencing_tokn' does not exist" in done.stdout
    assert "Property 'holder' does not exist" in done.stdout  # the 409 lock_held body is typed too
