"""A Celery app whose beat sends ``record`` every NODE_EVERY seconds: run it as ``celery -A ... worker -B``."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import kombu.transport.sqlalchemy
from celery import Celery
from celery.signals import beat_init, worker_ready

from schedlock.celery import SLOT_HEADER, SchedlockTask
from tests.support.nodes import common

QUEUE = os.environ["NODE_QUEUE"]

# kombu's SQLAlchemy transport on a SQLite file: a broker shared by processes with no server to run (the filesystem
# transport lets a worker read a message file its producer has not finished writing).
app = Celery("schedlock_node", broker=f"sqla+sqlite:///{QUEUE}/broker.sqlite3")
# The default second between polls is slow for ticks of a second (and the SQLAlchemy transport hands its transport
# options to create_engine, so it cannot be set there).
kombu.transport.sqlalchemy.Transport.polling_interval = 0.1
#: NODE_EXPIRES: the entry's own expiry, in seconds (unset or empty: each message expires at the entry's next tick).
OPTIONS = {"expires": float(os.environ["NODE_EXPIRES"])} if os.environ.get("NODE_EXPIRES") else {}
app.conf.update(
    beat_scheduler="schedlock.celery:MemorySlotScheduler",
    beat_schedule={"record": {"task": "node.record", "schedule": timedelta(seconds=common.EVERY), "options": OPTIONS}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_acks_late=False,
)


@app.task(  # type: ignore[untyped-decorator]  # Celery ships no type hints
    name="node.record",
    bind=True,
    base=SchedlockTask,
    schedlock_name=common.LOCK_NAME,
    schedlock_lock_at_most_for=common.LOCK_AT_MOST_FOR,
    schedlock_keep_alive=common.KEEP_ALIVE,
    schedlock_on_unavailable=common.ON_UNAVAILABLE,
    autoretry_for=(RuntimeError,),  # a failed run is retried at once, with the same message headers: the same tick
    default_retry_delay=0,
    max_retries=3,
)
def record(self: SchedlockTask) -> None:
    common.job(str(self.request.get(SLOT_HEADER) or "unstamped"))


@worker_ready.connect  # type: ignore[untyped-decorator]
def ready(**_: object) -> None:
    common.setup_logging()
    logging.getLogger("schedlock.celery").setLevel(logging.DEBUG)  # the expired messages a worker drops
    common.record("-", "ready")


@beat_init.connect  # type: ignore[untyped-decorator]
def beat_ready(**_: object) -> None:
    if os.environ.get("NODE_BEAT_ONLY") == "1":  # a worker's embedded beat is ready with its worker
        common.setup_logging()
        common.record("-", "ready")
