"""Factories that put tasks into exact states, for tests. Direct SQL is fine here (and only here,
with tests/support/probes.py, which TestDatabase mixes in)."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator

from shardq.client import Client
from shardq.errors import SerializationConflict
from shardq.models import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, RANK_SCHEDULED, ClaimedTask, TaskKey
from shardq.models.leases import Fenced
from shardq.sessions.dsn import Dsn
from shardq.sessions.rules import retry_pause
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from tests.support.probes import RowProbes

PROBE_ATTEMPTS = 10


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def probe(session: Session, query: str, params: dict | None = None) -> list[dict]:
    """``session.execute_raw`` for a test's own statement, retried on 40001 like the library's
    named statements are."""
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        try:
            return session.execute_raw(query, params or {})
        except SerializationConflict:
            if attempt == PROBE_ATTEMPTS:
                raise
            time.sleep(retry_pause(attempt))
    raise AssertionError("unreachable")


class TestDatabase(RowProbes):
    __test__ = False  # not a test class

    def __init__(self, dsn: Dsn, dialect: str, drop: tuple[str, str] | None = None) -> None:
        self.dsn = dsn
        self.dialect = dialect
        self._drop = drop
        self.reopen()

    def reopen(self) -> None:
        """A new client, session and store, and the layout read afresh."""
        self.client = Client(self.dsn, application_name="shardq-test")
        self.session = self.client.new_session()
        self.store = TaskStore(self.session)
        self.layout = self.store.layout()

    def close(self) -> None:
        self.client.close()
        if self._drop:
            url, name = self._drop
            with Session(Dsn.parse(url)) as s:
                # CockroachDB has no WITH (FORCE); PostgreSQL's CASCADE is not for databases.
                force = "CASCADE" if s.dialect == "cockroachdb" else "WITH (FORCE)"
                s.execute_raw(f'DROP DATABASE IF EXISTS "{name}" {force}')

    def sql(self, query: str, params: dict | None = None) -> list[dict]:
        """One autocommit statement, run again when SERIALIZABLE cancels it (a probe that reads
        while workers write can be the pivot; the statement rolled back, so running it again is
        safe)."""
        return probe(self.session, query, params)

    def make_task(
        self,
        queue: str = "q",
        *,
        payload: bytes = b"payload",
        state: str = "ready",
        exec_time: dt.datetime | None = None,
        attempts: int = 0,
        max_attempts: int = 25,
        lease_expires_at: dt.datetime | None = None,
        lease_token: uuid.UUID | None = None,
        dedupe_key: str | None = None,
        bucket: int | None = None,
        priority: int = 0,
        exclusive_key: str | None = None,
    ) -> ClaimedTask:
        """Insert one task row exactly as described (a leased task gets a token and, on
        PostgreSQL, its lease record). Returns it as a consumer would hold it."""
        task_id = uuid.uuid4()
        exec_time = exec_time or utcnow() - dt.timedelta(seconds=1)
        if state == "leased":
            lease_token = lease_token or uuid.uuid4()
            lease_expires_at = lease_expires_at or utcnow() + dt.timedelta(seconds=30)
        self.client.store.queue_ensure(queue)
        rank = {"scheduled": RANK_SCHEDULED, "backlog": RANK_BACKLOG}.get(state, priority)
        params = dict(
            queue=queue,
            state=state,
            rank=rank,
            priority=priority,
            exclusive_key=exclusive_key,
            backlogged=state == "backlog",
            exec_time=exec_time,
            id=task_id,
            attempts=attempts,
            max_attempts=max_attempts,
            lease_expires_at=lease_expires_at,
            lease_token=lease_token,
            payload=payload,
            dedupe_key=dedupe_key,
        )
        if self.dialect == "postgresql":
            params["bucket"] = bucket if bucket is not None else task_id.int % self.layout.bucket_count
            row = self.sql(
                "INSERT INTO shardq_tasks (bucket, queue, rank, exec_time, id, state, priority, exclusive_key,"
                " backlogged, attempts, max_attempts, lease_expires_at, lease_token, payload, dedupe_key)"
                " VALUES (%(bucket)s, %(queue)s, %(rank)s, %(exec_time)s, %(id)s, %(state)s, %(priority)s,"
                " %(exclusive_key)s, %(backlogged)s, %(attempts)s, %(max_attempts)s, %(lease_expires_at)s,"
                " %(lease_token)s, %(payload)s, %(dedupe_key)s) RETURNING bucket, created_at",
                params,
            )[0]
            if state == "leased":
                self.sql(
                    "INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)"
                    " VALUES (%(token)s, %(bucket)s, %(queue)s, %(expires)s, ARRAY[%(rank)s::int8],"
                    " ARRAY[%(exec_time)s::timestamptz], ARRAY[%(id)s::uuid])",
                    dict(
                        token=lease_token,
                        bucket=row["bucket"],
                        queue=queue,
                        expires=lease_expires_at,
                        rank=rank,
                        exec_time=exec_time,
                        id=task_id,
                    ),
                )
        else:
            shard = self.layout.shard_column
            row = self.sql(
                "INSERT INTO shardq_tasks (state, queue, rank, exec_time, id, priority, exclusive_key, backlogged,"
                " attempts, max_attempts, lease_expires_at, lease_token, payload, dedupe_key) VALUES (%(state)s,"
                " %(queue)s, %(rank)s, %(exec_time)s, %(id)s, %(priority)s, %(exclusive_key)s, %(backlogged)s,"
                " %(attempts)s, %(max_attempts)s, %(lease_expires_at)s, %(lease_token)s, %(payload)s,"
                " %(dedupe_key)s) RETURNING created_at",
                params,
            )[0]
            row["bucket"] = self.sql(
                f'SELECT "{shard}" AS b FROM shardq_tasks WHERE state = %(state)s AND queue = %(queue)s'
                " AND rank = %(rank)s AND exec_time = %(exec_time)s AND id = %(id)s",
                params,
            )[0]["b"]
        return ClaimedTask(
            key=TaskKey(int(row["bucket"]), queue, rank, exec_time, task_id),
            attempt=attempts,
            max_attempts=max_attempts,
            payload=payload,
            lease_token=lease_token or uuid.uuid4(),
            lease_expires_at=lease_expires_at or exec_time,
            created_at=row["created_at"],
            priority=priority,
            exclusive_key=exclusive_key,
        )

    def task_row(self, task_id) -> dict | None:
        rows = self.sql("SELECT * FROM shardq_tasks WHERE id = %(id)s", {"id": uuid.UUID(str(task_id))})
        return rows[0] if rows else None

    def dead_row(self, task_id) -> dict | None:
        rows = self.sql("SELECT * FROM shardq_dead WHERE id = %(id)s", {"id": uuid.UUID(str(task_id))})
        return rows[0] if rows else None

    def make_workflow(
        self,
        states: dict[str, str],
        *,
        edges: tuple[tuple[str, str], ...] = (),
        queue: str = "default",
        created_ago: float = 0.0,
        finished_ago: float = 0.0,
    ) -> uuid.UUID:
        """A workflow's rows as they stand: ``states`` by step name, each finished step
        ``finished_ago`` seconds ago, the workflow enqueued ``created_ago`` seconds ago (at least
        ``finished_ago``), ``edges`` as (parent, child). A step ``waiting`` or ``ready`` has its task
        row (a step ``ready`` without one has succeeded: shardq.workflows.steps); the others have none."""
        workflow_id = uuid.uuid4()
        created_ago = max(created_ago, finished_ago)
        task_ids = {step: uuid.uuid4() for step in states}
        open_steps = [step for step, state in states.items() if state in ("waiting", "ready")]
        if open_steps:
            self.session.fetch_all(
                "workflow_tasks_insert",
                {
                    "workflow_id": workflow_id,
                    "ids": [task_ids[s] for s in open_steps],
                    "queues": [queue] * len(open_steps),
                    "payloads": [b"{}"] * len(open_steps),
                    "priorities": [0] * len(open_steps),
                    "max_attempts": [None] * len(open_steps),
                    "waiting": [states[s] == "waiting" for s in open_steps],
                    "backlog_rank": RANK_BACKLOG,
                    "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
                },
            )
        self.sql(
            "INSERT INTO shardq_workflows (id, name, created_at)"
            " VALUES (%(id)s, 'made', now() - %(ago)s * INTERVAL '1 second')",
            {"id": workflow_id, "ago": created_ago},
        )
        for step, state in states.items():
            self.sql(
                "INSERT INTO shardq_workflow_steps (workflow_id, step, task_id, task, queue, state, waiting_on, finished_at)"
                " VALUES (%(w)s, %(step)s, %(task)s, 't', %(queue)s, %(state)s, 0,"
                " CASE WHEN %(state)s IN ('succeeded', 'dead', 'cancelled')"
                " THEN now() - %(ago)s * INTERVAL '1 second' END)",
                {
                    "w": workflow_id,
                    "step": step,
                    "task": task_ids[step],
                    "queue": queue,
                    "state": state,
                    "ago": finished_ago,
                },
            )
        for parent, child in edges:
            self.sql(
                "INSERT INTO shardq_workflow_edges (workflow_id, parent, child) VALUES (%(w)s, %(p)s, %(c)s)",
                {"w": workflow_id, "p": parent, "c": child},
            )
        return workflow_id

    def workflow_rows(self, workflow_id: uuid.UUID) -> tuple[int, int, int]:
        """How many rows the workflow has: (its own row, steps, edges)."""
        params = {"w": workflow_id}
        return (
            self.sql("SELECT count(*) AS n FROM shardq_workflows WHERE id = %(w)s", params)[0]["n"],
            self.sql("SELECT count(*) AS n FROM shardq_workflow_steps WHERE workflow_id = %(w)s", params)[0]["n"],
            self.sql("SELECT count(*) AS n FROM shardq_workflow_edges WHERE workflow_id = %(w)s", params)[0]["n"],
        )

    def count(self, table: str = "shardq_tasks") -> int:
        assert table in ("shardq_tasks", "shardq_dead", "shardq_leases", "shardq_queues")
        return self.sql(f"SELECT count(*) AS n FROM {table}")[0]["n"]


def run_until_settled(worker, outcomes: int, timeout: float = 30.0):
    """Run ``worker`` on a thread until it has acked or lost ``outcomes`` tasks, then stop it;
    returns its totals (waits on its events, never sleeps)."""
    done = threading.Event()

    def settled(event, task, details) -> None:
        if worker.totals.acked + worker.totals.lease_lost >= outcomes:
            done.set()

    worker.on_event = settled
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert done.wait(timeout), worker.totals
    worker.stop()
    thread.join(timeout)
    return worker.totals


def fenced(task: ClaimedTask) -> Fenced:
    return Fenced(task.key, task.lease_token)


@contextlib.contextmanager
def wake_up_refused_once(session: Session, statement: str) -> Iterator[list[str]]:
    """While open, the first ``statement`` sent on ``session`` fails as PostgreSQL fails a commit
    whose NOTIFY finds the notification queue full (SQLSTATE 54000, a listener that stopped
    reading); later ones go through. Yields the list of the times ``statement`` was sent."""
    from psycopg import errors as pgerrors

    calls: list[str] = []

    def refuse_once(name: str) -> None:
        if name == statement:
            calls.append(name)
            if len(calls) == 1:
                raise pgerrors.ProgramLimitExceeded("too many notifications in the NOTIFY queue (injected)")

    session.before_statement = refuse_once
    try:
        yield calls
    finally:
        session.before_statement = None


def listening_store(dsn: Dsn, queues: list[str]) -> TaskStore:
    """A store on a session of its own that LISTENs for the wake-ups of ``queues`` (read them with
    ``notifications(timeout)``; close its session when done)."""
    from shardq.lifecycle.notify import Listener

    store = TaskStore(Session(dsn))
    assert Listener(store, queues).start()
    return store
