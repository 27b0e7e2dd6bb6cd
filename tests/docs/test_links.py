"""The docs hold together: every relative link reaches a file (and a heading, when it names one), and every path
they name in backticks exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = sorted(
    [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), ROOT / "client" / "README.md", *ROOT.glob("helm/*/README.md")]
)
#: Pages another branch is writing: a link to one may dangle until it lands (remove the entry when it has).
PENDING: dict[str, str] = {}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"`((?:app|bench|client|docs|examples|helm|integrations|openapi|scripts|tests)/[\w./-]*)`")


def prose(text: str) -> str:
    """The page without its fenced blocks: code is not a link."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's ids for the page's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        name = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
        if not file.exists():
            if name not in PENDING:
                broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {name}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_repository_paths_a_page_names_exist(page: Path) -> None:
    missing = [path for path in REPO_PATH.findall(prose(page.read_text())) if not (ROOT / path).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_paths_in_layout_exist() -> None:
    """Each backticked path in docs/layout.md exists: at the root, or under the section's own folder."""
    missing = []
    base = ROOT
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        heading = re.match(r"^## .*`([^`]+/)`", line)
        if heading:
            base = ROOT / heading.group(1)
        for path in re.findall(r"`([\w./-]+(?:/|\.(?:py|md|json|sh|toml|lua)))`", line):
            if not ((ROOT / path).exists() or (base / path).exists() or any(base.rglob(path.rstrip("/")))):
                missing.append(path)
    assert not missing, f"docs/layout.md names paths that do not exist: {missing}"


def _layout_rows() -> dict[str, set[str]]:
    """docs/layout.md's table rows: the first cell's path -> every backticked name in the row."""
    rows: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and (first := re.findall(r"`([^`]+)`", cells[1])):
            for path in first:
                rows.setdefault(path, set()).update(re.findall(r"`([^`]+)`", line))
    return rows


def test_layout_names_every_module_of_the_server_and_the_client() -> None:
    """The other direction: every module of app/ and client/src/schedlock/ (and every tests/support helper) is named
    in docs/layout.md, in the row of its package (a top-level module in a row of its own)."""
    rows = _layout_rows()
    text = (ROOT / "docs" / "layout.md").read_text()
    unnamed = []
    for module in sorted((ROOT / "app").rglob("*.py")):
        parts = module.relative_to(ROOT).parts
        if module.name == "__init__.py" or "versions" in parts:
            continue
        if len(parts) == 2:  # app/x.py: a row of its own
            if f"app/{module.name}" not in rows:
                unnamed.append(module.relative_to(ROOT).as_posix())
        elif module.name not in rows.get(f"app/{parts[1]}/", set()):
            unnamed.append(module.relative_to(ROOT).as_posix())
    client = ROOT / "client" / "src" / "schedlock"
    named_client = set().union(*(names for path, names in rows.items() if path.endswith(".py")))
    unnamed += [f"client/src/schedlock/{m.name}" for m in sorted(client.glob("*.py")) if m.name not in named_client]
    unnamed += [
        f"tests/support/{m.name}"
        for m in sorted((ROOT / "tests" / "support").glob("*.py"))
        if m.name != "__init__.py" and f"`{m.name}`" not in text
    ]
    assert not unnamed, f"docs/layout.md does not name: {unnamed}"


def test_layout_names_every_folder_of_the_tests() -> None:
    """Every folder of tests/ that holds test modules is named in docs/layout.md's tests section, as a path or, under
    tests/system/, as its subfolder's name in that row."""
    section = (ROOT / "docs" / "layout.md").read_text().partition("## The tests: `tests/`")[2]
    unnamed = []
    for folder in sorted({module.parent for module in (ROOT / "tests").rglob("test_*.py")}):
        parts = folder.relative_to(ROOT / "tests").parts
        name = f"`{parts[1]}/`" if parts[0] == "system" and len(parts) > 1 else f"`tests/{'/'.join(parts)}/`"
        if name not in section:
            unnamed.append(folder.relative_to(ROOT).as_posix())
    assert not unnamed, f"docs/layout.md's tests section does not name: {unnamed}"
