"""The peer: a throwaway etcd (Debian's ``etcd-server``, 3.4) and the try-lock spoken through its JSON gateway.

The harness starts one etcd member of its own: a fresh data directory, two free loopback ports, every other
setting as shipped (so the WAL is fsynced on every commit, as Postgres's is with ``synchronous_commit`` on), and
removes both at the end. The lock is the same try-lock as schedlock's, one key per lock name:

- acquire: a lease with TTL = lock_at_most_for, then a txn ``create_revision(key) == 0`` → put key=token with
  that lease. The key then expires on its own ``lock_at_most_for`` after the acquisition, as a row's
  ``lock_until`` does.
- release: a txn ``value(key) == token`` → delete key. A stale or wrong token changes nothing.

How leases are granted and disposed of (``--etcd-lease``):

- ``exact`` (the default): a lease for each attempt, revoked when the attempt finds the key held and after the
  release. A lease left to expire would be revoked by etcd itself 30 s later, inside some other side's run.
  4 requests per cycle, 3 per refused attempt.
- ``revoke``: the same leases, but the release is the revoke (the key goes with its lease), as ShedLock's own etcd
  provider releases: the lease id is the token. 3 requests per cycle, 3 per refused attempt.
- ``reuse``: each client lends one lease to all its attempts for up to a second: 2 requests per cycle, 1 per
  refused attempt, but a lock may then expire up to a second before lock_at_most_for has passed.

The request bodies below are the ones wrk_script.lua sends (it fills in the ``%s``); tests/system/bench/test_etcd.py
sends them to a real etcd to check the semantics.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench.target import free_port, terminate

#: A lease per acquisition (the same contract as lock_at_most_for), released by txn or by revoke; or one per client.
LEASE_MODES = ("exact", "revoke", "reuse")
#: How long a client lends one lease to its acquisitions in "reuse" mode, in seconds.
REUSE_SECONDS = 1.0

#: Each request as (path, body template); wrk_script.lua fills in the ``%s``. Keys and values are base64.
GRANT = ("/v3/lease/grant", '{"TTL":"%s"}')  # TTL in seconds
REVOKE = ("/v3/lease/revoke", '{"ID":"%s"}')  # lease id
ACQUIRE = (  # key, key, value (the token), lease id
    "/v3/kv/txn",
    '{"compare":[{"key":"%s","target":"CREATE","result":"EQUAL","create_revision":"0"}],'
    '"success":[{"request_put":{"key":"%s","value":"%s","lease":"%s"}}]}',
)
RELEASE = (  # key, value (the token), key
    "/v3/kv/txn",
    '{"compare":[{"key":"%s","target":"VALUE","result":"EQUAL","value":"%s"}],'
    '"success":[{"request_delete_range":{"key":"%s"}}]}',
)

REQUESTS = {"GRANT": GRANT, "ACQUIRE": ACQUIRE, "RELEASE": RELEASE, "REVOKE": REVOKE}


def etcd_path() -> str | None:
    """The etcd binary (Debian: ``apt-get install etcd-server``), or None."""
    return shutil.which("etcd")


def version() -> str:
    out = subprocess.run([etcd_path() or "etcd", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0].replace("etcd Version:", "etcd").strip() if out.stdout else "unknown"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass
class Etcd:
    """A running etcd member: client URL, process and data directory (removed by :func:`stop`)."""

    url: str
    pid: int
    process: subprocess.Popen[bytes]
    data_dir: Path

    def call(self, path: str, body: str = "{}") -> dict[str, Any]:
        """POST one JSON gateway request; returns the decoded answer (errors raise urllib's HTTPError)."""
        request = urllib.request.Request(self.url + path, data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def reset(self) -> None:
        """Revoke every lease and delete every key, so the next phase starts on free names with no lease left."""
        for lease in self.call("/v3/lease/leases", "{}").get("leases", []):
            try:
                self.call(REVOKE[0], REVOKE[1] % lease["ID"])
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # expired meanwhile
                    raise
        everything = b64("\0")  # key "\0" with range_end "\0": every key
        self.call("/v3/kv/deleterange", json.dumps({"key": everything, "range_end": everything}))


def start(log: IO[bytes], parent: Path | None = None) -> Etcd:
    """Start a one-member etcd on free loopback ports with a new data directory; returns once it answers."""
    binary = etcd_path()
    if binary is None:
        raise RuntimeError("etcd is not installed: `apt-get install etcd-server` (./scripts/test installs it)")
    data_dir = Path(tempfile.mkdtemp(prefix="schedlock-bench-etcd-", dir=parent))
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    command = [binary, "--name", "bench", "--data-dir", str(data_dir / "member-data")]
    command += ["--listen-client-urls", client, "--advertise-client-urls", client]
    command += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
    command += ["--initial-cluster", f"bench={peer}", "--logger", "zap", "--log-outputs", "stderr"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}  # etcd reads ETCD_* as flags
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    etcd = Etcd(client, process.pid, process, data_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop(etcd)
            raise RuntimeError(f"etcd exited with {process.returncode}; see {log.name}")
        try:
            etcd.call("/v3/kv/range", json.dumps({"key": b64("ready?")}))
            return etcd
        except OSError:
            time.sleep(0.1)
    stop(etcd)
    raise RuntimeError(f"etcd did not answer within 30 s; see {log.name}")


def stop(etcd: Etcd) -> None:
    """Stop the member and remove its data directory."""
    terminate(etcd.process)
    shutil.rmtree(etcd.data_dir, ignore_errors=True)


def wrk_env(lease: str, at_most_s: int) -> dict[str, str]:
    """What wrk_script.lua needs to speak etcd: the request templates and the lease policy."""
    if lease not in LEASE_MODES:
        raise ValueError(f"lease mode {lease!r}: one of {', '.join(LEASE_MODES)}")
    return {
        "BENCH_PROTOCOL": "etcd",
        "BENCH_ETCD_LEASE": lease,
        "BENCH_ETCD_REUSE_US": str(int(REUSE_SECONDS * 1e6)),
        "BENCH_ETCD_TTL": str(at_most_s),
        **{f"BENCH_ETCD_{op}": f"{path} {body}" for op, (path, body) in REQUESTS.items()},
    }
