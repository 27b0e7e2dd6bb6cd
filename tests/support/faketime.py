"""libfaketime, for a server process whose clocks run apart from the machine's (LD_PRELOAD plus FAKETIME)."""

from __future__ import annotations

import glob

import pytest


def libfaketime() -> str:
    """The path of libfaketime.so.1; its absence is a failure (./scripts/test installs it), never a skip."""
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not found:
        pytest.fail("libfaketime is not installed: apt-get install libfaketime (./scripts/test does)")
    return found[0]
