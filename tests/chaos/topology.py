"""The campaign's world: a throwaway Postgres cluster, one fault proxy per server, schedlock server processes on
fixed ports (so that a restarted one comes back where its clients look for it), one of them under libfaketime with a
clock the nemesis moves.

Black-box: the servers are real ``schedlock-server serve`` processes (``python -m app serve``), the table is
migrated by ``python -m app migrate``, and nothing here imports the app.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.chaos.pgbouncer import PgBouncer
from tests.support.faketime import libfaketime
from tests.support.faultproxy import FaultProxy
from tests.support.pgcluster import PgCluster
from tests.support.replication import ReplicatedPair, replicated_pair
from tests.support.servers import LiveServer, free_port, spawn_server, stop_server, wait_for

ROOT = Path(__file__).parent.parent.parent
TABLE = "shedlock"
#: Short timeouts, so that a fault answers 503 within a few seconds instead of holding the workers.
SERVER_ENV = {
    "SCHEDLOCK_TABLE": TABLE,
    "SCHEDLOCK_DB_CONNECT_TIMEOUT": "1",
    "SCHEDLOCK_DB_STATEMENT_TIMEOUT": "1",
    "SCHEDLOCK_DB_POOL_TIMEOUT": "1",
    "SCHEDLOCK_POOL_MAX_SIZE": "4",
    "SCHEDLOCK_LOG_LEVEL": "WARNING",
    "SCHEDLOCK_HISTORY_FLUSH_INTERVAL": "1",
}


#: The throwaway cluster's settings beyond tests/support/pgcluster.py's. Commits must be durable across the
#: immediate restarts the nemesis makes: with pgcluster's synchronous_commit = off, an immediate stop loses commits
#: already acknowledged (the checker saw releases and Java grants vanish). fsync stays off: only processes crash.
PG_SETTINGS = {"max_connections": "100", "synchronous_commit": "on"}


class Topology:
    """``servers`` server processes over one database; server 1 (if there is one) runs under libfaketime with its
    clock offset read from ``clock_file``; ``planted`` launches server 0 through tests.chaos.planted instead."""

    def __init__(
        self,
        workdir: Path,
        servers: int = 2,
        planted: bool = False,
        pgbouncer: bool = False,
        standby: bool = False,
        encoding: str = "UTF8",
    ) -> None:
        self.workdir = workdir
        # Another encoding than the cluster's UTF8 is a database of its own (issue 20, defect 3: LATIN1, SQL_ASCII).
        self.dbname = "postgres" if encoding == "UTF8" else f"chaos_{encoding.lower()}"
        # With a standby: a primary that waits for a synchronous standby to confirm every commit
        # (tests/support/replication.py), for the nemesis to promote.
        self.pair: ReplicatedPair | None = replicated_pair(synchronous=True) if standby else None
        self.cluster = self.pair.primary if self.pair is not None else PgCluster()
        self.proxies: list[FaultProxy] = []
        self.java_proxy: FaultProxy | None = None
        self.servers: list[LiveServer | None] = []
        self.planted = planted
        self.clock_file = workdir / "clock"
        self.clock_offset = 0.0
        self.pgbouncer: PgBouncer | None = None
        try:
            if self.pair is None:
                self.cluster.start(**PG_SETTINGS)
            if self.dbname != "postgres":
                create = f"CREATE DATABASE {self.dbname} ENCODING '{encoding}' LOCALE 'C' TEMPLATE template0"
                subprocess.run(
                    [str(self.cluster.bin / "psql"), self.cluster.url, "-c", create], check=True, capture_output=True
                )
            url = self.cluster.url.rsplit("/", 1)[0] + f"/{self.dbname}"
            env = {**self._base_env(), "SCHEDLOCK_DATABASE_URL": url, "SCHEDLOCK_TABLE": TABLE}
            subprocess.run([sys.executable, "-m", "app", "migrate"], env=env, check=True, capture_output=True)
            self.set_clock(0.0)
            targets = [self.cluster.port] * servers
            if pgbouncer:  # the last server reaches Postgres through PgBouncer, behind its fault proxy
                self.pgbouncer = PgBouncer(self.cluster.port, self.dbname)
                targets[-1] = self.pgbouncer.port
            self.proxies = [FaultProxy(target) for target in targets]
            self.java_proxy = FaultProxy(self.cluster.port)  # never broken: it follows a promotion
            self.ports = [free_port() for _ in range(servers)]
            self.servers = [None] * servers
            for index in range(servers):  # all at once: a server takes seconds to start on a loaded machine
                self.start(index, wait=False)
            for server in self.servers:
                assert server is not None
                wait_for(server)
        except BaseException:
            self.destroy()
            raise

    @property
    def java_url(self) -> str:
        assert self.java_proxy is not None
        return f"postgresql://postgres@127.0.0.1:{self.java_proxy.port}/{self.dbname}"

    def promote(self) -> str:
        """Stop the primary as a crashed host would, promote the standby, and point every link at it."""
        if self.pair is None or self.cluster is self.pair.standby:
            return "no standby to promote"
        self.pair.primary.stop("immediate")
        self.pair.standby.promote()
        self.cluster = self.pair.standby
        for proxy in [*self.proxies, *([self.java_proxy] if self.java_proxy else [])]:
            if self.pgbouncer is None or proxy.target_port != self.pgbouncer.port:
                proxy.target_port = self.cluster.port
            proxy.reset()
        return f"standby on port {self.cluster.port} promoted"

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def _base_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDLOCK_", "FAKETIME", "LD_PRELOAD"))}

    def _env(self, index: int) -> dict[str, str]:
        env = {**self._base_env(), **SERVER_ENV}
        env["SCHEDLOCK_DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:{self.proxies[index].port}/{self.dbname}"
        if index == 1:
            # Every clock of the process (monotonic ones too: faking only the wall clock made libuv and asyncpg mix
            # two clocks, tests/system/ha/test_replicas.py), from a file re-read every second.
            env |= {"LD_PRELOAD": libfaketime(), "FAKETIME_TIMESTAMP_FILE": str(self.clock_file)}
            env |= {"FAKETIME_CACHE_DURATION": "1"}
        if self.pgbouncer is not None and index == len(self.proxies) - 1:
            # asyncpg's statement cache off: what PgBouncer's transaction pooling needs. The setting is issue 20's
            # (defect 3's work); a server without it ignores the variable, and meets PgBouncer with its cache on.
            env["SCHEDLOCK_DB_STATEMENT_CACHE_SIZE"] = "0"
        return env

    def start(self, index: int, wait: bool = True) -> None:
        module = "tests.chaos.planted" if self.planted and index == 0 else "app"
        command = [sys.executable, "-m", module, "serve", "--port", str(self.ports[index])]
        server = spawn_server(command, self._env(index), self.ports[index])
        self.servers[index] = server
        if wait:
            wait_for(server)

    def kill(self, index: int) -> None:
        server = self.servers[index]
        if server is None:
            return
        server.process.kill()
        server.process.wait()
        self._keep_log(index, stop_server(server))
        self.servers[index] = None

    def _keep_log(self, index: int, output: str) -> None:
        """What a server printed (its warnings and errors: SCHEDLOCK_LOG_LEVEL=WARNING), kept beside the history."""
        with (self.workdir / f"server-{index}.log").open("a") as log:
            log.write(output)

    def signal(self, index: int, signum: signal.Signals) -> None:
        server = self.servers[index]
        if server is not None and server.process.poll() is None:
            os.kill(server.process.pid, signum)

    def set_clock(self, offset: float) -> None:
        """The faked server's clock runs ``offset`` seconds from the machine's (libfaketime's "+N" form)."""
        self.clock_offset = offset
        self.clock_file.write_text(f"{offset:+.0f}\n")

    def heal(self) -> None:
        """Every fault undone: links pass, paused servers run, dead ones are started again, Postgres is up."""
        for proxy in self.proxies:
            proxy.set_mode("pass")
        if self.cluster.running:
            self.cluster.thaw()
        else:
            self.cluster.start(**PG_SETTINGS)
        for index, server in enumerate(self.servers):
            if server is None or server.process.poll() is not None:
                if server is not None:
                    self._keep_log(index, stop_server(server))
                self.start(index)
            else:
                self.signal(index, signal.SIGCONT)
                wait_for(server)

    def destroy(self) -> None:
        for index, server in enumerate(self.servers):
            if server is not None:
                self.signal(index, signal.SIGCONT)
                self._keep_log(index, stop_server(server))
        for proxy in [*self.proxies, *([self.java_proxy] if self.java_proxy else [])]:
            proxy.close()
        if self.pgbouncer is not None:
            self.pgbouncer.stop()
        if self.pair is not None:
            self.pair.destroy()
        else:
            self.cluster.destroy()
