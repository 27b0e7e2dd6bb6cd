"""How long the suite waits for what a loaded machine makes slow (CI is a developer's own 2-core machine, shared).

A deadline here only bounds a failure: every wait that uses one polls a condition, so a pass never depends on it.
They are generous because a server start-up or an answer on a machine at load 20 takes many times what it takes idle
(a server's imports alone took over 30 s beside two CPU hogs and other work).
"""

from __future__ import annotations

#: A process the suite starts (a server, a cluster member) becomes ready within this many seconds.
START_UP = 180.0
#: One HTTP answer from a server the suite started arrives within this many seconds.
ANSWER = 60.0
#: A probe's own timeout while waiting for something to come up (each probe is retried until START_UP).
PROBE = 5.0
#: A condition the suite polls for (a log line written, a count settled, a process gone, the database's clock past a
#: moment) holds within this many seconds.
SETTLE = 120.0
