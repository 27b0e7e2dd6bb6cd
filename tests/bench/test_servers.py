"""python -m bench.servers reads its variants: a label and a command each (the servers run in
tests/system/bench/test_servers.py)."""

from __future__ import annotations

import argparse

import pytest

from bench.servers import parse_variant


def test_a_variant_is_a_label_and_a_command() -> None:
    assert parse_variant("granian=granian --port {port} x:y") == ("granian", ["granian", "--port", "{port}", "x:y"])
    for bad in ("granian", "=granian", "granian=  "):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_variant(bad)
