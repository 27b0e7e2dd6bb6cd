"""What threads do for :class:`Lease`: keep-alive on a daemon thread. The twin of ``_tasks.py``.

The generated ``_sync.py`` calls the same names here that ``_async.py`` calls in ``_tasks.py``. A thread cannot be
interrupted, so a blocking body learns of a lost lock from ``on_lost``, ``lease.check()`` or ``assert_locked()``:
the body hooks below do nothing.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable

from schedlock._exceptions import LockLost


def check_job(func: Callable[..., object]) -> None:
    """Refuse an ``async def`` job: decorated here, it would only be created, never run, under the lock."""
    if inspect.iscoroutinefunction(func):
        raise TypeError(f"{func.__qualname__} is async: decorate it with AsyncLockClient.scheduler_lock")


class SyncKeeper:
    """Runs a lease's keep-alive on a daemon thread, so that it never keeps the process alive."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, keep_alive: Callable[[], None], lock_name: str) -> None:
        self._thread = threading.Thread(target=keep_alive, name=f"schedlock-keepalive-{lock_name}", daemon=True)
        self._thread.start()

    def pause(self, seconds: float) -> bool:
        """Wait until the next extension is due; False when :meth:`stop` was called meanwhile."""
        return not self._stop.wait(seconds)

    def stop(self) -> None:
        """End keep-alive and wait until its thread has finished (unless this is that thread)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def enter_body(self) -> None:
        pass

    def exit_body(self) -> None:
        pass

    def lost(self, error: LockLost) -> None:
        pass

    def raise_lost(self, exc_type: type[BaseException] | None, error: LockLost | None) -> None:
        pass
