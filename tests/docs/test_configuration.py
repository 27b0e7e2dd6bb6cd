"""docs/configuration.md documents every setting with its real default, and the docs name no variable that does
not exist."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app.settings import Settings

ROOT = Path(__file__).parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
#: Every page that may name a variable: the docs, the READMEs (the chart's too), the contributors' guide.
PAGES = [
    *ROOT.glob("*.md"),
    *(ROOT / "docs").glob("*.md"),
    ROOT / "client" / "README.md",
    ROOT / "helm" / "schedlock" / "README.md",
]
#: SCHEDLOCK_* variables that are not server settings, and the file that reads (or sets) each.
OTHER_VARIABLES = {
    "SCHEDLOCK_URL": "client/src/schedlock/_base.py",
    "SCHEDLOCK_TOKEN": "client/src/schedlock/_base.py",
    "SCHEDLOCK_TOKEN_FILE": "client/src/schedlock/_base.py",
    "SCHEDLOCK_LOCK_NAME": "client/src/schedlock/_run.py",
    "SCHEDLOCK_FENCING_TOKEN": "client/src/schedlock/_run.py",
    "SCHEDLOCK_SLOT": "client/src/schedlock/_run.py",
    "SCHEDLOCK_TEST_DATABASE_URL": "tests/conftest.py",
    "SCHEDLOCK_TEST_NEWEST": "scripts/test",
    "SCHEDLOCK_PATRONI_FAULTS": "tests/system/ha/test_patroni.py",
    "SCHEDLOCK_PATRONI_MODES": "tests/system/ha/test_patroni.py",
    "SCHEDLOCK_PATRONI_EVIDENCE": "tests/support/patroni.py",
    "SCHEDLOCK_PATRONI_BIN": "tests/support/patroni.py",
    # Django settings and job class attributes of the django-cron lock backend (docs/django-cron.md)
    **{
        f"SCHEDLOCK_{name}": "client/src/schedlock/django_cron.py"
        for name in (
            "KEEP_ALIVE",
            "LOCK_AT_MOST_FOR",
            "NAME_PREFIX",
            "ONCE_PER",
            "ON_UNAVAILABLE",
            "TIMEOUT",
            "TIMEZONE",
        )
    },
}
VARIABLE = re.compile(r"\bSCHEDLOCK_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def documented_settings() -> dict[str, str]:
    """The Settings table of docs/configuration.md: variable -> its default cell."""
    text = CONFIGURATION.read_text()
    start = text.index("## Settings\n")
    section = text[start : text.find("\n## ", start + 1)]
    table = section[section.index("| variable |") :].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        variable, default = (cell.strip() for cell in line.strip("|").split("|")[:2])
        name = variable.strip("`")
        assert name not in rows, f"{name} is documented twice"
        rows[name] = default
    return rows


def setting_variables() -> set[str]:
    return {f"SCHEDLOCK_{field.upper()}" for field in Settings.model_fields}


def test_every_setting_is_documented_and_nothing_else() -> None:
    documented, real = set(documented_settings()), setting_variables()
    assert not real - documented, f"settings missing from docs/configuration.md: {sorted(real - documented)}"
    assert not documented - real, f"docs/configuration.md documents settings that do not exist: {documented - real}"


@pytest.mark.parametrize("variable", sorted(documented_settings()))
def test_the_documented_default_is_the_default(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    field = variable.removeprefix("SCHEDLOCK_").lower()
    if field not in Settings.model_fields:
        pytest.fail(f"{variable} is not a setting")  # test_every_setting_is_documented_and_nothing_else says more
    default = Settings.model_fields[field].default
    cell = documented_settings()[variable]
    for name in os.environ:
        if name.startswith("SCHEDLOCK_"):
            monkeypatch.delenv(name)
    if cell == "unset":
        assert default is None
        return
    assert re.fullmatch(r"`[^`]+`", cell), f"{variable}: write the default as `value` or unset, not {cell!r}"
    monkeypatch.setenv(variable, cell.strip("`"))
    assert getattr(Settings(), field) == default, f"{variable}: the documented default {cell} is not the default"


def test_every_variable_the_docs_name_exists() -> None:
    known = setting_variables() | set(OTHER_VARIABLES)
    for page in PAGES:
        unknown = set(VARIABLE.findall(page.read_text())) - known
        assert not unknown, f"{page.relative_to(ROOT)} names variables that do not exist: {sorted(unknown)}"
    for variable, reader in OTHER_VARIABLES.items():
        assert variable in (ROOT / reader).read_text(), f"{reader} no longer reads {variable}"
