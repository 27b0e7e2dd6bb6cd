"""A real Patroni cluster on loopback: a 1-node etcd (Debian's ``etcd-server``), three Patroni nodes (PyPI's
``patroni``, pinned in scripts/patroni.lock, installed by scripts/test in ``.venv-patroni``, over Debian's
``postgresql``), and HAProxy (Debian's ``haproxy``) routing to whichever node Patroni's REST API calls the primary
(``GET /primary``), as Patroni's documentation sets it up. ``SCHEDLOCK_PATRONI_BIN`` names another directory holding
``patroni`` and ``patronictl`` (e.g. ``/usr/bin``, Debian's 3.0.2, for scripts/patroni_loss.py).

Everything runs on free ports of 127.0.0.1, with its data in one temporary directory. Patroni and Postgres run
as the ``postgres`` user (Postgres refuses root). Each Patroni node talks to etcd through a FaultProxy of its own
(``use_proxies``: no topology discovery that would bypass it), so a test can cut one node off from etcd.
``destroy`` kills every process the cluster started, Postgres servers orphaned by a killed Patroni included.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support import patience
from tests.support.faultproxy import FaultProxy
from tests.support.patroni_config import SCOPE, haproxy_config, patroni_config
from tests.support.servers import free_port

#: A directory: when set, every cluster's logs (each Postgres logging its writes and connections) and the servers' are
#: kept there, the evidence of a failure that cannot be re-run at will (docs/high-availability.md).
EVIDENCE = "SCHEDLOCK_PATRONI_EVIDENCE"
#: Where ``patroni`` and ``patronictl`` are.
PATRONI_BIN = Path(os.environ.get("SCHEDLOCK_PATRONI_BIN") or Path(__file__).parents[2] / ".venv-patroni" / "bin")
#: A write that waits for a synchronous standby like any commit, and leaves nothing in any table.
PROBE = "SELECT pg_catalog.pg_logical_emit_message(true, 'schedlock-probe', '')"


@dataclass
class Node:
    name: str
    root: Path
    pg_port: int
    rest_port: int
    etcd_link: FaultProxy
    process: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.root / "patroni.yml"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def postgres_pids(self) -> list[int]:
        """The postmaster and every process it started; empty when it is not running."""
        try:
            parent = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return []
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    children.append(int(stat.parent.name))
        return [parent, *children] if Path(f"/proc/{parent}").exists() else []


@dataclass
class PatroniCluster:
    """Start with ``patroni_cluster()``; ``destroy()`` always."""

    root: Path
    synchronous: bool
    nodes: list[Node] = field(default_factory=list)
    etcd: subprocess.Popen[bytes] | None = None
    etcd_port: int = 0
    haproxy: subprocess.Popen[bytes] | None = None
    haproxy_port: int = 0

    @property
    def url(self) -> str:
        """Every node, the primary wanted: schedlock connects to the first that takes writes."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    @property
    def haproxy_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.haproxy_port}/postgres"

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view (``GET /cluster``) from the first node whose REST API answers."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError):
                return list(
                    httpx.get(f"http://127.0.0.1:{node.rest_port}/cluster", timeout=patience.PROBE).json()["members"]
                )
        return []

    def leader(self) -> str | None:
        return self._leading(self.members())

    def healthy(self) -> bool:
        """A running leader streaming to every other node (as its own Postgres reports it: a replica Patroni calls
        running may still be failing to start on a diverged timeline), one of them synchronous in that mode."""
        members = self.members()
        if len(members) != len(self.nodes):
            return False
        if self.synchronous and not any(m["role"] == "sync_standby" for m in members):
            return False
        return self._leading(members) is not None and not self.stragglers(members)

    def stragglers(self, members: list[dict[str, Any]] | None = None) -> list[str]:
        """The members the running leader's Postgres does not see streaming (none while there is no leader)."""
        members = self.members() if members is None else members
        leader = self._leading(members)
        if leader is None:
            return []
        others = [n.name for n in self.nodes if n.name != leader]
        with contextlib.suppress(httpx.HTTPError, ValueError):
            status = httpx.get(f"http://127.0.0.1:{self.node(leader).rest_port}/patroni", timeout=patience.PROBE).json()
            replication = status.get("replication", [])
            streaming = {r.get("application_name") for r in replication if r.get("state") == "streaming"}
            return [name for name in others if name not in streaming]
        return others

    @staticmethod
    def _leading(members: list[dict[str, Any]]) -> str | None:
        return next((m["name"] for m in members if m["role"] == "leader" and m["state"] == "running"), None)

    def takes_writes(self, within: float = 5) -> bool:
        """Whether the cluster commits a write of its own within ``within`` seconds (PROBE, as a superuser on
        the multi-host URL; a transaction id alone writes no WAL and waits for no standby). False with no primary,
        and in synchronous strict mode while no standby streams (the commit waits; the timeout ends it)."""
        try:
            done = subprocess.run(
                ["psql", "-X", "-At", "-d", self.url, "-c", PROBE],
                capture_output=True,
                timeout=within,
                env={**os.environ, "PGCONNECT_TIMEOUT": "2"},
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def recover(self, timeout: float = 60) -> str:
        """Healthy within ``timeout``, or else every member that does not stream from the leader is rebuilt from it
        (``patronictl reinit``), as an operator would, and the cluster gets START_UP more. Returns the leader."""
        try:
            return self.wait_healthy(timeout)
        except RuntimeError:
            stragglers = self.stragglers()
            print(f"\nthe cluster is not healthy after {timeout:.0f} s: patronictl reinit {stragglers}")
            for name in stragglers:
                self.reinit(self.node(name))
            return self.wait_healthy()

    def wait_healthy(self, timeout: float = patience.START_UP) -> str:
        try:
            poll(self.healthy, timeout, "a healthy Patroni cluster")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {self.members()}\n{self.logs()}") from None
        leader = self.leader()
        assert leader is not None
        return leader

    def start_patroni(self, node: Node) -> None:
        log = (node.root / "patroni.log").open("ab")
        node.process = subprocess.Popen(
            [patroni_command("patroni"), str(node.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=node.root,
            start_new_session=True,  # its own process group: destroy() kills it with whatever it started
            **_as_postgres(),
        )
        log.close()

    def reinit(self, node: Node) -> None:
        """``patronictl reinit``: the node's data is replaced by a fresh copy of the leader's."""
        subprocess.run(
            [patroni_command("patronictl"), "-c", str(node.config), "reinit", SCOPE, node.name, "--force", "--wait"],
            capture_output=True,
            timeout=120,
        )

    def kill_patroni(self, node: Node) -> None:
        """Patroni dies (SIGKILL) and nothing else: its Postgres goes on, still a primary if it was one."""
        assert node.process is not None
        node.process.kill()
        node.process.wait(10)

    def kill_postgres(self, node: Node) -> None:
        """Every process of the node's Postgres dies at once, as in a crash; Patroni lives on."""
        for pid in node.postgres_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def signal_postgres(self, node: Node, signum: int) -> None:
        for pid in node.postgres_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def switchover(self, leader: str) -> str:
        """``patronictl switchover`` to a replica (in synchronous mode the synchronous one: Patroni allows no
        other); returns once the candidate leads. Returns its name."""
        wanted = "sync_standby" if self.synchronous else "replica"
        candidate: str = next(m["name"] for m in self.members() if m["role"] == wanted)
        done = subprocess.run(
            [
                patroni_command("patronictl"),
                "-c",
                str(self.nodes[0].config),
                "switchover",
                *("--leader", leader, "--candidate", candidate),
                "--force",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        poll(lambda: self.leader() == candidate, patience.START_UP, f"{candidate} to lead: {done.stdout}{done.stderr}")
        return candidate

    def pids(self) -> list[int]:
        """Every process the cluster runs now: etcd, HAProxy, each Patroni and each Postgres."""
        processes = [self.etcd, self.haproxy, *(n.process for n in self.nodes)]
        alive = [p.pid for p in processes if p is not None and p.poll() is None]
        return alive + [pid for n in self.nodes for pid in n.postgres_pids()]

    def ports(self) -> list[int]:
        own = [p for n in self.nodes for p in (n.pg_port, n.rest_port, n.etcd_link.port)]
        return [*own, self.etcd_port, self.haproxy_port]

    def logs(self) -> str:
        return "\n".join(
            f"--- {n.name}\n{(n.root / 'patroni.log').read_text(errors='replace')[-12000:]}" for n in self.nodes
        )

    def destroy(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(10)
            self.kill_postgres(node)  # one whose Patroni was killed earlier: that group's leader is gone
            node.etcd_link.close()
        for process in (self.haproxy, self.etcd):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        keep = os.environ.get(EVIDENCE)
        if keep:  # the logs only: Patroni's, Postgres's (patroni_config), etcd's and HAProxy's
            ignored = shutil.ignore_patterns("data", "etcd", ".s.PGSQL*")
            shutil.copytree(self.root, Path(keep) / self.root.name, ignore=ignored, dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)


def patroni_command(name: str) -> str:
    """``patroni`` or ``patronictl`` of PATRONI_BIN; a clear error when it is not installed (run scripts/test)."""
    path = PATRONI_BIN / name
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing: ./scripts/test installs Patroni (scripts/patroni.lock) there")
    return str(path)


def patroni_cluster(*, synchronous: bool, size: int = 3) -> PatroniCluster:
    """etcd, ``size`` Patroni nodes (the first bootstraps, the others clone it) and HAProxy, all started;
    waits until the cluster is healthy. On failure everything started is torn down."""
    root = Path(tempfile.mkdtemp(prefix="schedlock-patroni-"))
    root.chmod(0o755)
    cluster = PatroniCluster(root, synchronous)
    try:
        _start_etcd(cluster)
        for index in range(size):
            node_root = root / f"node{index}"
            node_root.mkdir(mode=0o700)
            link = FaultProxy(cluster.etcd_port)
            node = Node(f"node{index}", node_root, free_port(), free_port(), link)
            cluster.nodes.append(node)
            settings = patroni_config(node.name, node.root, node.pg_port, node.rest_port, link.port, synchronous)
            node.config.write_text(json.dumps(settings, indent=2))
            if os.geteuid() == 0:
                shutil.chown(node_root, "postgres", "postgres")
        cluster.start_patroni(cluster.nodes[0])
        poll(lambda: cluster.leader() is not None, patience.START_UP, "the first node to bootstrap")
        for node in cluster.nodes[1:]:
            cluster.start_patroni(node)
        _start_haproxy(cluster)
        cluster.wait_healthy()
    except BaseException:
        logs = cluster.logs() if cluster.nodes else ""
        cluster.destroy()
        raise RuntimeError(f"the Patroni cluster did not start:\n{logs}") from None
    return cluster


def _start_etcd(cluster: PatroniCluster) -> None:
    cluster.etcd_port, peer = free_port(), free_port()
    client, peer_url = f"http://127.0.0.1:{cluster.etcd_port}", f"http://127.0.0.1:{peer}"
    log = (cluster.root / "etcd.log").open("ab")
    cluster.etcd = subprocess.Popen(
        [
            *("etcd", "--name", "etcd0", "--data-dir", str(cluster.root / "etcd")),
            *("--listen-client-urls", client, "--advertise-client-urls", client),
            *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
            *("--initial-cluster", f"etcd0={peer_url}", "--unsafe-no-fsync"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()

    def answers() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{client}/health", timeout=patience.PROBE).status_code == 200
        return False

    poll(answers, patience.START_UP, "etcd")


def _start_haproxy(cluster: PatroniCluster) -> None:
    """TCP to the node whose Patroni answers 200 on /primary; connections to a node marked down are cut."""
    cluster.haproxy_port = free_port()
    nodes = [(n.name, n.pg_port, n.rest_port) for n in cluster.nodes]
    (cluster.root / "haproxy.cfg").write_text(haproxy_config(cluster.haproxy_port, nodes))
    log = (cluster.root / "haproxy.log").open("ab")
    cluster.haproxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(cluster.root / "haproxy.cfg")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()


def _as_postgres() -> dict[str, Any]:
    """Popen arguments that run the child as the postgres user when the tests run as root."""
    if os.geteuid() != 0:
        return {}
    home = "/var/lib/postgresql"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDLOCK_", "PG"))}
    return {
        "user": "postgres",
        "group": "postgres",
        "extra_groups": [],
        "env": {**env, "HOME": home, "USER": "postgres"},
    }


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def poll(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)
