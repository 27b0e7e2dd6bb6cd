"""Random bytes from the operating system's CSPRNG (``os.urandom``), read 4 KiB at a time rather than one system
call per lease token, lease id or request id (a call per acquire was ~5-9% of the server's CPU under load;
docs/performance.md, "Coalescing"). Every byte is handed out once. A forked child starts with an empty buffer, so
it never repeats what its parent hands out; a lock keeps two threads from taking the same bytes.
"""

from __future__ import annotations

import os
import threading


class RandomBytes:
    _SIZE = 4096

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self._lock = threading.Lock()
        self._buffer, self._at = b"", 0

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes (at most 4096)."""
        with self._lock:
            at = self._at
            if at + n > len(self._buffer):
                self._buffer, at = os.urandom(max(self._SIZE, n)), 0
            self._at = at + n
            return self._buffer[at : at + n]


random_bytes = RandomBytes().take
