"""The shared buffer of OS randomness (app.randomness) that lease tokens, lease ids and request ids are cut from:
every byte handed out once, across refills, threads and a fork."""

from __future__ import annotations

import re
import threading

from app.locking.leases import new_locked_by, new_token
from app.randomness import RandomBytes
from tests.support.fork import first_in_forked_child


def test_bytes_are_handed_out_once_across_refills() -> None:
    source = RandomBytes()
    chunks = [source.take(32) for _ in range(1000)]  # ~8 refills of the 4 KiB buffer
    assert all(len(c) == 32 for c in chunks)
    assert len(set(chunks)) == len(chunks)
    assert len(source.take(5000)) == 5000  # larger than the buffer: read at once


def test_threads_never_take_the_same_bytes() -> None:
    source, taken = RandomBytes(), list[bytes]()

    def worker() -> None:
        taken.extend(source.take(16) for _ in range(2000))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(taken)) == len(taken) == 8000


def test_tokens_and_lease_ids_are_fresh_and_a_forked_child_does_not_repeat_them() -> None:
    tokens = [new_token() for _ in range(500)]
    assert len(set(tokens)) == 500
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", t) and not t.startswith("-") for t in tokens)
    ids = {new_locked_by("job").rsplit(" ", 1)[1] for _ in range(500)}
    assert len(ids) == 500
    child_token = first_in_forked_child(new_token)  # the one its parent is about to hand out, if not reseeded
    assert len(child_token) == 43 and child_token != new_token()
