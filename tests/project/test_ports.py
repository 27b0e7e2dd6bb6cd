"""The suite's and the benchmark's servers (Postgres clusters, Patroni, etcd, schedlock) listen on ports
``bench.target.free_port`` picks (``tests.support.servers`` has it from there): free, and outside the range the
kernel lends to outgoing connections, which could take one before it is bound."""

from __future__ import annotations

import socket

from bench.target import _ephemeral_low, free_port


def test_a_picked_port_is_free_and_below_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    ports = {free_port() for _ in range(50)}
    assert all(10_000 <= port < low for port in ports), sorted(ports)
    assert len(ports) > 40  # drawn at random, not one after the other
    for port in list(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
