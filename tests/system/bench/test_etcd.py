"""The benchmark's etcd peer does the same try-lock as schedlock: checked against a real etcd (Debian's etcd-server).

The requests are the templates bench/etcd.py hands to wrk_script.lua, sent here as they are; then wrk itself runs
them, and what it wrote into etcd is read back. Nothing here is about speed.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
from collections.abc import Iterator

import pytest

from bench import etcd as peer
from bench.loadgen import Load, run_wrk


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[peer.Etcd]:
    log_dir = tmp_path_factory.mktemp("etcd")
    with (log_dir / "etcd.log").open("wb") as log:
        server = peer.start(log)
        try:
            yield server
        finally:
            peer.stop(server)
    assert not server.data_dir.exists() and server.process.returncode is not None


def _grant(etcd: peer.Etcd, ttl: int = 30) -> str:
    path, body = peer.GRANT
    lease = etcd.call(path, body % ttl)["ID"]
    assert isinstance(lease, str) and lease.isdigit()
    return lease


def _acquire(etcd: peer.Etcd, name: str, token: str, lease: str) -> bool:
    path, body = peer.ACQUIRE
    key = peer.b64(name)
    return etcd.call(path, body % (key, key, peer.b64(token), lease)).get("succeeded") is True


def _release(etcd: peer.Etcd, name: str, token: str) -> bool:
    path, body = peer.RELEASE
    key = peer.b64(name)
    return etcd.call(path, body % (key, peer.b64(token), key)).get("succeeded") is True


def _value(etcd: peer.Etcd, name: str, revision: int = 0) -> str | None:
    kvs = etcd.call("/v3/kv/range", json.dumps({"key": peer.b64(name), "revision": str(revision)})).get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def test_a_held_key_refuses_a_second_acquire_and_only_its_token_releases_it(etcd: peer.Etcd) -> None:
    name = "bench-test-held"
    first, second = _grant(etcd), _grant(etcd)
    assert _acquire(etcd, name, "token-a", first)
    assert not _acquire(etcd, name, "token-b", second)  # held: the second acquire fails
    assert _value(etcd, name) == "token-a"

    assert not _release(etcd, name, "token-b")  # the wrong token changes nothing
    assert not _release(etcd, name, "token-a-but-longer")
    assert _value(etcd, name) == "token-a"

    assert _release(etcd, name, "token-a")
    assert _value(etcd, name) is None
    assert not _release(etcd, name, "token-a")  # a second release finds nothing to delete
    assert _acquire(etcd, name, "token-b", second)  # free again
    assert _release(etcd, name, "token-b")


def test_the_key_lives_and_dies_with_its_lease(etcd: peer.Etcd) -> None:
    name, lease = "bench-test-lease", _grant(etcd)
    assert _acquire(etcd, name, "token-a", lease)
    path, body = peer.REVOKE
    etcd.call(path, body % lease)  # what expiry of lock_at_most_for does, without waiting 30 s
    assert _value(etcd, name) is None
    assert _acquire(etcd, name, "token-b", _grant(etcd))

    etcd.reset()
    assert _value(etcd, name) is None
    assert etcd.call("/v3/lease/leases").get("leases", []) == []
    with pytest.raises(urllib.error.HTTPError):  # a put with a lease that is gone fails: no lock without expiry
        _acquire(etcd, name, "token-c", lease)


def test_revoking_the_lease_releases_and_a_wrong_lease_releases_nothing(etcd: peer.Etcd) -> None:
    name, lease, other = "bench-test-revoke", _grant(etcd), _grant(etcd)
    assert _acquire(etcd, name, "token-a", lease)
    path, body = peer.REVOKE
    etcd.call(path, body % other)  # someone else's lease (a stale holder's has expired: it is not even found)
    assert _value(etcd, name) == "token-a"
    etcd.call(path, body % lease)
    assert _value(etcd, name) is None
    with pytest.raises(urllib.error.HTTPError, match="404"):
        etcd.call(path, body % lease)


@pytest.mark.parametrize(
    ("lease", "requests_per_cycle", "leases_left"),
    [
        ("exact", 4, 2),  # grant, acquire, release, revoke; only a cycle cut short by the end of the run leaves one
        ("revoke", 3, 2),  # grant, acquire, revoke
        ("reuse", 2, 2 * 2),  # acquire, release; a lease per client per second
    ],
)
def test_wrk_writes_the_names_and_tokens_and_disposes_of_its_leases(
    etcd: peer.Etcd, lease: str, requests_per_cycle: int, leases_left: int
) -> None:
    etcd.reset()
    revision = int(etcd.call("/v3/kv/range", json.dumps({"key": peer.b64("x")}))["header"]["revision"])
    load = Load("own", clients=2, seconds=1, names=4, prefix="bench-wrk-")
    phase = run_wrk(etcd.url, load, peer.wrk_env(lease, 30))
    assert phase.counts["acq_ok"] > 10 and phase.errors() == 0, phase.counts
    assert phase.http_requests is not None
    assert requests_per_cycle * phase.counts["rel_ok"] <= phase.http_requests
    assert phase.http_requests < (requests_per_cycle + 1) * phase.counts["rel_ok"]

    # The first put of the run, read back from etcd's history: Lua's base64 of the name and of its token.
    everything = peer.b64("\0")
    first = etcd.call(
        "/v3/kv/range", json.dumps({"key": everything, "range_end": everything, "revision": revision + 1})
    )
    (kv,) = first["kvs"]
    assert re.fullmatch(r"bench-wrk-00000[0-3]", base64.b64decode(kv["key"]).decode())
    assert re.fullmatch(r"bench-[01]-\d+-[0-9a-f]{8}", base64.b64decode(kv["value"]).decode())
    assert kv["lease"] != "0"
    assert len(etcd.call("/v3/lease/leases").get("leases", [])) <= leases_left
