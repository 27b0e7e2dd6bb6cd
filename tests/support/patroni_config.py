"""What the Patroni harness (tests/support/patroni.py) writes: each node's Patroni configuration and HAProxy's.

The settings docs/high-availability.md recommends, with the test's short timings: a failure is seen within
seconds, so a fault test stays short.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.support.pgcluster import _bin_dir

SCOPE = "schedlock"
#: Failure detection: the leader key lives ``ttl`` seconds; ttl >= loop_wait + 2 * retry_timeout (Patroni's rule).
DCS = {"ttl": 10, "loop_wait": 1, "retry_timeout": 4}
#: Fast and fragile where it is safe: fsync off loses nothing when processes die (the OS keeps the page cache).
#: full_page_writes stays on: pg_rewind refuses a source without it, and an old leader that cannot be rewound
#: crash-loops ("requested timeline N does not contain minimum recovery point") until it is rebuilt.
PARAMETERS = {
    "fsync": "off",
    "wal_log_hints": "on",  # pg_rewind, so an old leader rejoins as a replica
    "max_connections": "100",
    "wal_sender_timeout": "5s",  # a standby gone silent stops counting as synchronous within seconds
    "wal_receiver_status_interval": "1s",
    "synchronous_commit": "on",
}


def patroni_config(
    name: str, root: Path, pg_port: int, rest_port: int, etcd_port: int, synchronous: bool
) -> dict[str, Any]:
    """One node's patroni.yml (as JSON, which YAML reads): its data and sockets under ``root``, etcd at
    ``etcd_port`` (a proxy: no topology discovery), trust on loopback, ``synchronous_mode_strict`` or async."""
    trust = ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
    mode = {"synchronous_mode": True, "synchronous_mode_strict": True} if synchronous else {}
    return {
        "scope": SCOPE,
        "name": name,
        "log": {"level": "INFO"},
        "restapi": {"listen": f"127.0.0.1:{rest_port}", "connect_address": f"127.0.0.1:{rest_port}"},
        "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"], "use_proxies": True},
        "bootstrap": {
            "dcs": {
                **DCS,
                **mode,
                "maximum_lag_on_failover": 1048576,
                # A crashed primary fails over at once instead of being restarted in place for up to 5 minutes.
                "primary_start_timeout": 0,
                "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": PARAMETERS, "pg_hba": trust},
            },
            "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{pg_port}",
            "connect_address": f"127.0.0.1:{pg_port}",
            "data_dir": str(root / "data"),
            "bin_dir": str(_bin_dir()),
            "pgpass": str(root / "pgpass"),
            "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "replicator"}},
            "parameters": {"unix_socket_directories": str(root), **_evidence(root)},
            "pg_hba": trust,
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }


def haproxy_config(port: int, nodes: list[tuple[str, int, int]]) -> str:
    """TCP on ``port`` to the node (name, Postgres port, REST port) whose Patroni answers 200 on /primary;
    connections to a node marked down are cut (``on-marked-down shutdown-sessions``)."""
    servers = "\n".join(f"  server {name} 127.0.0.1:{pg} check port {rest}" for name, pg, rest in nodes)
    return (
        "global\n  maxconn 300\n"
        "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 30m\n  timeout server 30m\n"
        "  timeout check 1s\n"
        f"listen primary\n  bind 127.0.0.1:{port}\n"
        "  option httpchk GET /primary\n  http-check expect status 200\n"
        "  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n"
        f"{servers}\n"
    )


def _evidence(root: Path) -> dict[str, str]:
    """With SCHEDLOCK_PATRONI_EVIDENCE set, each Postgres logs every write (with its parameters: the lock names),
    connection and warning, stamped to the millisecond with its process and transaction, under ``root``/pglog."""
    if not os.environ.get("SCHEDLOCK_PATRONI_EVIDENCE"):
        return {}
    return {
        "logging_collector": "on",
        "log_directory": str(root / "pglog"),
        "log_filename": "postgresql-%H%M%S.log",
        "log_line_prefix": "%m [%p] %a %c %x ",
        "log_statement": "mod",
        "log_connections": "on",
        "log_disconnections": "on",
    }
