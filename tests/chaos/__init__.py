"""A fault campaign with a checker, Jepsen-style: ``python -m tests.chaos --help``; docs/reliability.md.

The harness is black-box. It starts a throwaway Postgres cluster (tests/support/pgcluster.py), two or more real
``schedlock-server serve`` processes over one database, each through a fault proxy of its own
(tests/support/faultproxy.py); client processes whose workers acquire, extend and release leases and slots over a
few names through every server (client.py); Java ShedLock nodes replaying ShedLock's statements on the table
(java_nodes.py); and a nemesis that breaks things on a seeded schedule (nemesis.py). Every operation is recorded
with what it asked and what it was told (history.py); once the faults heal, the campaign probes every name and reads
the table and the run history, and the checker (checker.py, grants.py: pure functions) decides.

Modules: ``campaign`` (one run, start to verdict), ``topology`` (cluster, proxies, servers; ``pgbouncer`` for
``--pgbouncer``), ``planted`` (a server with a bug planted, for the checker to catch), ``__main__`` (the command).
"""
