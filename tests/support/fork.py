"""What a forked child produces first, for the tests that a forked worker does not repeat its parent's randomness."""

from __future__ import annotations

import os
from collections.abc import Callable


def first_in_forked_child(produce: Callable[[], str]) -> str:
    """Fork; the child calls ``produce`` once and sends the result back; the parent returns it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, produce().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    try:
        return os.read(read_end, 4096).decode()
    finally:
        os.close(read_end)
        os.close(write_end)
