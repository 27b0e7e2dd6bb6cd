"""Write the Python CLI's help texts into the Go binary's sources (integrations/go/cmd/schedlock/help/), so that both
`schedlock` commands print the same help. Run it after changing a help text of client/src/schedlock/_cli*.py;
tests/system/cli_conformance fails while the two differ.

    .venv/bin/python scripts/cli_help.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HELP = Path(__file__).resolve().parent.parent / "integrations" / "go" / "cmd" / "schedlock" / "help"
#: argparse wraps to the terminal's width; the texts are written, and compared, at 80 columns.
COLUMNS = "80"
SUBCOMMANDS = ("run", "list", "status", "release", "runs", "force-release", "jobs")


def texts() -> dict[str, str]:
    """Each parser's help, as `schedlock [SUBCOMMAND] --help` prints it: "main" for the command's own."""
    env = {**os.environ, "COLUMNS": COLUMNS}
    command = [sys.executable, "-m", "schedlock"]
    found = {}
    for name, args in [("main", []), *((sub, [sub]) for sub in SUBCOMMANDS)]:
        done = subprocess.run([*command, *args, "--help"], env=env, capture_output=True, text=True, check=True)
        found[name] = done.stdout
    return found


def main() -> None:
    HELP.mkdir(exist_ok=True)
    for name, text in texts().items():
        (HELP / f"{name}.txt").write_text(text)


if __name__ == "__main__":
    main()
