"""The fenced code blocks of a documentation page, for tests that run a page's examples as written."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).parent.parent.parent / "docs"


def page_blocks(page: str, language: str) -> list[str]:
    """Every ```language block of docs/``page``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / page).read_text(), re.S)


def page_block(page: str, language: str, containing: str) -> str:
    """The one ```language block of docs/``page`` that contains ``containing``."""
    (block,) = [b for b in page_blocks(page, language) if containing in b]
    return block
