"""Write the Python CLI's help texts into the Go binary's sources (integrations/go/cmd/schedlock/help/), so that both
`schedlock` commands print the same help. Run it after changing a help text of client/src/schedlock/_cli*.py;
tests/cli_conformance fails while the two differ.

    .venv/bin/python scripts/cli_help.py
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HELP = Path(__file__).resolve().parent.parent / "integrations" / "go" / "cmd" / "schedlock" / "help"
#: argparse wraps to the terminal's width; the texts are written, and compared, at 80 columns.
COLUMNS = "80"


def texts() -> dict[str, str]:
    """Each parser's help: "main" for `schedlock --help`, then one per subcommand."""
    os.environ["COLUMNS"] = COLUMNS
    from schedlock._cli import _parser

    parser, _ = _parser()
    found = {"main": parser.format_help()}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public way to its subparsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            found.update({name: sub.format_help() for name, sub in action.choices.items()})
    return found


def main() -> None:
    HELP.mkdir(exist_ok=True)
    for name, text in texts().items():
        (HELP / f"{name}.txt").write_text(text)


if __name__ == "__main__":
    main()
