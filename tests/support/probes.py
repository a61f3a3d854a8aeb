"""Named probes and state changes on a test database: the facts tests read and the small edits
they make to rows, so no test module sends SQL of its own (tests/project/test_raw_sql_in_tests.py).
Mixed into ``TestDatabase``; where the engines differ, the method branches once here."""

from __future__ import annotations

import re
import uuid

from shardq.models import RANK_BACKLOG

_COLUMN = re.compile(r"^[a-z_][a-z0-9_]*$")


def _columns(columns: tuple[str, ...]) -> str:
    assert columns and all(_COLUMN.match(c) for c in columns), columns
    return ", ".join(columns)


def _uuid(value) -> uuid.UUID:
    return uuid.UUID(str(value))


class RowProbes:
    """Probes over ``self.sql`` (one autocommit statement, run again on 40001)."""

    dialect: str

    def sql(self, query: str, params: dict | None = None) -> list[dict]:  # pragma: no cover - TestDatabase's
        raise NotImplementedError

    # -- tasks ----------------------------------------------------------------------------------

    def count_tasks(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        payload: bytes | str | None = None,
        states: tuple[str, ...] | None = None,
    ) -> int:
        """How many task rows there are, of ``state`` (or any of ``states``), ``queue`` and ``payload`` when given."""
        where: list[str] = ["true"]
        params: dict = {}
        if state is not None:
            where.append("state = %(state)s")
            params["state"] = state
        if states is not None:
            where.append("state = ANY(%(states)s)")
            params["states"] = list(states)
        if queue is not None:
            where.append("queue = %(queue)s")
            params["queue"] = queue
        if payload is not None:
            where.append("payload = %(payload)s")
            params["payload"] = payload.encode() if isinstance(payload, str) else payload
        return self.sql(f"SELECT count(*) AS n FROM shardq_tasks WHERE {' AND '.join(where)}", params)[0]["n"]

    def tasks(self, *columns: str, queue: str | None = None) -> list[dict]:
        """``columns`` of every task row (of ``queue`` when given), in no particular order."""
        if queue is None:
            return self.sql(f"SELECT {_columns(columns)} FROM shardq_tasks")
        return self.sql(f"SELECT {_columns(columns)} FROM shardq_tasks WHERE queue = %(q)s", {"q": queue})

    def task_states_by_id(self, queue: str | None = None) -> dict[str, str]:
        """Each task row's state, by its id as text (of ``queue`` when given)."""
        if queue is None:
            rows = self.sql("SELECT id::TEXT AS id, state FROM shardq_tasks")
        else:
            rows = self.sql("SELECT id::TEXT AS id, state FROM shardq_tasks WHERE queue = %(q)s", {"q": queue})
        return {r["id"]: r["state"] for r in rows}

    def task_ids(self, queue: str | None = None) -> list[str]:
        """Every task row's id as text (of ``queue`` when given)."""
        return list(self.task_states_by_id(queue))

    def task_columns(self, task_id, *columns: str) -> dict | None:
        """``columns`` of one task row, or None when it has gone."""
        rows = self.sql(f"SELECT {_columns(columns)} FROM shardq_tasks WHERE id = %(id)s", {"id": _uuid(task_id)})
        return rows[0] if rows else None

    def delete_all_tasks(self) -> None:
        self.sql("DELETE FROM shardq_tasks WHERE true")

    def expire_lease(self, task_id, token: uuid.UUID | None = None) -> None:
        """The task's lease ran out a second ago; on PostgreSQL its lease record too (the one of
        ``token``, or every record when no token is given), as the reaper finds expired leases
        through the records there."""
        self.sql(
            "UPDATE shardq_tasks SET lease_expires_at = now() - INTERVAL '1 second' WHERE id = %(id)s",
            {"id": _uuid(task_id)},
        )
        if self.dialect != "postgresql":
            return
        if token is None:
            self.sql("UPDATE shardq_leases SET expires_at = now() - INTERVAL '1 second' WHERE true")
        else:
            self.sql(
                "UPDATE shardq_leases SET expires_at = now() - INTERVAL '1 second' WHERE token = %(token)s",
                {"token": token},
            )

    def make_due(self, task_id) -> None:
        """The task's exec_time a second ago (its retry is due now)."""
        self.sql(
            "UPDATE shardq_tasks SET exec_time = now() - INTERVAL '1 second' WHERE id = %(id)s", {"id": _uuid(task_id)}
        )

    def replace_lease_token(self, task_id, token: uuid.UUID) -> None:
        """Another claim's token on the task row (its holder has lost it)."""
        self.sql("UPDATE shardq_tasks SET lease_token = %(t)s WHERE id = %(id)s", {"t": token, "id": _uuid(task_id)})

    def set_last_error(self, task_id, error: str) -> None:
        self.sql("UPDATE shardq_tasks SET last_error = %(e)s WHERE id = %(id)s", {"e": error, "id": _uuid(task_id)})

    def mark_workflow(self, task_ids, mark: uuid.UUID) -> None:
        """``mark`` as the workflow_id of the task rows ``task_ids``."""
        self.sql(
            "UPDATE shardq_tasks SET workflow_id = %(m)s WHERE id::TEXT = ANY(%(ids)s)",
            {"m": mark, "ids": [str(i) for i in task_ids]},
        )

    def task_hold(self, task_id) -> list[dict]:
        """The task row's state, rank, attempts, lease_token and whether its lease still holds (``held``)."""
        return self.sql(
            "SELECT state, rank, attempts, lease_token, lease_expires_at > now() AS held"
            " FROM shardq_tasks WHERE id = %(id)s",
            {"id": _uuid(task_id)},
        )

    def count_expired_leases(self) -> int:
        """Task rows still leased whose lease has run out."""
        return self.sql("SELECT count(*) AS n FROM shardq_tasks WHERE state = 'leased' AND lease_expires_at < now()")[
            0
        ]["n"]

    def lease_seconds_left(self) -> float:
        """Seconds until the (first) task row's lease runs out."""
        return float(self.sql("SELECT extract(epoch FROM lease_expires_at - now()) AS s FROM shardq_tasks")[0]["s"])

    def lease_records(self, token: uuid.UUID) -> list[dict]:
        """The claim records (bucket, queue, ids) of ``token`` (PostgreSQL)."""
        return self.sql("SELECT bucket, queue, ids FROM shardq_leases WHERE token = %(token)s", {"token": token})

    def set_backoff(self, queue: str, base: float, cap: float) -> None:
        self.sql(
            "UPDATE shardq_queues SET backoff_base = %(b)s, backoff_cap = %(c)s WHERE name = %(q)s",
            {"b": base, "c": cap, "q": queue},
        )

    def lease_again(self, task, attempts: int) -> dict:
        """The task row leased again in place at its priority's rank, on attempt ``attempts``, with
        ``task``'s token for 30 s; on PostgreSQL a lease record (of another token) for it too.
        Returns the row."""
        self.sql(
            "UPDATE shardq_tasks SET state = 'leased', rank = priority, attempts = %(a)s, lease_token = %(t)s,"
            " lease_expires_at = now() + interval '30 seconds' WHERE id = %(id)s",
            {"a": attempts, "t": task.lease_token, "id": task.key.id},
        )
        rows = self.sql("SELECT * FROM shardq_tasks WHERE id = %(id)s", {"id": task.key.id})
        row = rows[0]
        if self.dialect == "postgresql":
            self.sql(
                "INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids) VALUES"
                " (%(t)s, %(b)s, %(q)s, now(), ARRAY[%(r)s::int8], ARRAY[%(e)s::timestamptz], ARRAY[%(id)s::uuid])",
                {
                    "t": uuid.uuid4(),
                    "b": task.key.bucket,
                    "q": task.key.queue,
                    "r": row["rank"],
                    "e": row["exec_time"],
                    "id": task.key.id,
                },
            )
        return row

    def lease_record_sizes(self) -> list[dict]:
        """Each claim record's token, bucket and how many tasks it holds (``n``), by bucket (PostgreSQL)."""
        return self.sql("SELECT token, bucket, cardinality(ids) AS n FROM shardq_leases ORDER BY bucket")

    # -- queues, slots, the server --------------------------------------------------------------

    def pause_dequeue(self, queue: str) -> None:
        self.sql("UPDATE shardq_queues SET paused_dequeue = true WHERE name = %(q)s", {"q": queue})

    def set_paused_enqueue(self, queue: str, paused: bool) -> None:
        self.sql("UPDATE shardq_queues SET paused_enqueue = %(p)s WHERE name = %(q)s", {"p": paused, "q": queue})

    def set_lease_seconds(self, queue: str, seconds: float) -> None:
        """The queue's lease_seconds as stored, past the client's own checks (the table's CHECK still holds)."""
        self.sql("UPDATE shardq_queues SET lease_seconds = %(s)s WHERE name = %(q)s", {"s": seconds, "q": queue})

    def server_now(self):
        return self.sql("SELECT now() AS now")[0]["now"]

    def server_clock_at_or_before(self, moment) -> bool:
        """Whether the server's clock has not yet passed ``moment``."""
        return self.sql("SELECT now() <= %(e)s AS waiting", {"e": moment})[0]["waiting"]

    def slot_free_ats(self) -> list:
        return [r["free_at"] for r in self.sql("SELECT free_at FROM shardq_slots")]

    def take_every_slot(self) -> None:
        """Every flow slot taken by another token (as when one expired and was taken)."""
        self.sql("UPDATE shardq_slots SET token = gen_random_uuid()")

    def count_rate_tokens(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_rate_tokens")[0]["n"]

    def count_listeners(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_listeners")[0]["n"]

    def count_sessions(self, application_name: str) -> int:
        """Backends of this database with ``application_name`` (PostgreSQL)."""
        return self.sql(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %(a)s"
            " AND datname = current_database()",
            {"a": application_name},
        )[0]["n"]

    def terminate_backend(self, pid: int) -> None:
        self.sql("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})

    def age_history(self, seconds: float, task_id=None) -> None:
        """History rows finished ``seconds`` earlier (of ``task_id`` when given, else all)."""
        if task_id is None:
            self.sql("UPDATE shardq_history SET finished_at = now() - %(s)s * INTERVAL '1 second'", {"s": seconds})
        else:
            self.sql(
                "UPDATE shardq_history SET finished_at = now() - %(s)s * INTERVAL '1 second' WHERE id = %(id)s",
                {"s": seconds, "id": _uuid(task_id)},
            )

    def age_some_history(self, queue: str, rows: int, seconds: float) -> None:
        """``rows`` of ``queue``'s history rows finished ``seconds`` earlier."""
        self.sql(
            f"UPDATE shardq_history SET finished_at = now() - %(s)s * INTERVAL '1 second'"
            f" WHERE id IN (SELECT id FROM shardq_history WHERE queue = %(q)s LIMIT {int(rows)})",
            {"s": seconds, "q": queue},
        )

    def history(self, *columns: str) -> list[dict]:
        return self.sql(f"SELECT {_columns(columns)} FROM shardq_history")

    # -- stats ----------------------------------------------------------------------------------

    def add_stats_minute(
        self, minutes_ago: int, *, queue: str = "q", slot: int = 0, enqueued: int = 0, acked: int = 0, dead: int = 0
    ) -> None:
        """One stats row for the minute ``minutes_ago`` before this one."""
        self.sql(
            "INSERT INTO shardq_stats (queue, minute, slot, enqueued, acked, dead) VALUES (%(q)s,"
            " date_trunc('minute', now()) - %(m)s * INTERVAL '1 minute', %(s)s, %(e)s, %(a)s, %(d)s)",
            {"q": queue, "m": minutes_ago, "s": slot, "e": enqueued, "a": acked, "d": dead},
        )

    def add_broken_latency_history(self, queue: str) -> None:
        """Half an hour of busy minutes before ``queue``'s latest stats row, with a quiet minute
        after that row and a quiet stretch (minutes 14 to 18 back) in the middle."""
        self.sql(
            "INSERT INTO shardq_stats (queue, minute, slot, enqueued, acked, handled, first_starts,"
            " start_wait_seconds, lead_acks, lead_seconds)"
            " SELECT %(q)s, (SELECT max(minute) FROM shardq_stats WHERE queue = %(q)s) - m * INTERVAL '1 minute',"
            " 0, 20, 20, 20, 20, 20 * (0.4 + (m %% 7) * 0.15), 20, 20 * (2.5 + (m %% 11) * 0.4)"
            " FROM generate_series(2, 32) AS m WHERE m NOT BETWEEN 14 AND 18",
            {"q": queue},
        )

    def hourly_acked(self) -> int:
        """The acks summed over the hourly rollup."""
        return self.sql("SELECT sum(acked) AS n FROM shardq_stats_hourly")[0]["n"] or 0

    def forget_stats_minutes_older_than(self, minutes: int) -> None:
        self.sql(
            "DELETE FROM shardq_stats WHERE minute < date_trunc('minute', now()) - %(m)s * INTERVAL '1 minute'",
            {"m": minutes},
        )

    def latency_counters(self, queue: str) -> dict:
        """The queue's latency counters summed over its stats rows."""
        return self.sql(
            "SELECT sum(first_starts)::INT8 AS first_starts, sum(start_wait_seconds) AS wait,"
            " sum(lead_acks)::INT8 AS lead_acks, sum(lead_seconds) AS lead, sum(acked)::INT8 AS acked"
            " FROM shardq_stats WHERE queue = %(q)s",
            {"q": queue},
        )[0]

    def hourly_lead(self, queue: str) -> list[dict]:
        return self.sql("SELECT lead_acks, lead_seconds FROM shardq_stats_hourly WHERE queue = %(q)s", {"q": queue})

    def age_tasks(self, seconds: float) -> None:
        """Every task row created ``seconds`` ago."""
        self.sql("UPDATE shardq_tasks SET created_at = now() - %(s)s * INTERVAL '1 second'", {"s": seconds})

    def age_workers(self, seconds: float) -> None:
        """Every worker's last beat ``seconds`` ago."""
        self.sql("UPDATE shardq_workers SET beat_at = now() - %(s)s * INTERVAL '1 second'", {"s": seconds})

    def add_stats_at(self, seconds_ago: float, *, queue: str = "q", slot: int = 0, acked: int = 0) -> None:
        """One stats row whose minute is exactly ``seconds_ago`` before now (not truncated to a minute)."""
        self.sql(
            "INSERT INTO shardq_stats (queue, minute, slot, acked) VALUES"
            " (%(q)s, now() - %(ago)s * INTERVAL '1 second', %(s)s, %(a)s)",
            {"q": queue, "ago": seconds_ago, "s": slot, "a": acked},
        )

    def count_stats_rows(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_stats")[0]["n"]

    def make_queue_due(self, queue: str) -> None:
        """Every task of ``queue`` due a second ago."""
        self.sql("UPDATE shardq_tasks SET exec_time = now() - interval '1 second' WHERE queue = %(q)s", {"q": queue})

    def age_task(self, task_id, seconds: float) -> None:
        """The task row created ``seconds`` ago."""
        self.sql(
            "UPDATE shardq_tasks SET created_at = now() - %(s)s * INTERVAL '1 second' WHERE id = %(id)s",
            {"s": seconds, "id": _uuid(task_id)},
        )

    def fill_bucket_zero(self, queue: str, ready: int, scheduled: int, scheduled_rank: int) -> None:
        """``ready`` ready tasks (due a microsecond apart, in the past) and ``scheduled`` scheduled
        ones (a second apart, ahead) of ``queue``, all in bucket 0 (PostgreSQL)."""
        self.sql(
            "INSERT INTO shardq_tasks (bucket, queue, rank, exec_time, id, state, payload) SELECT 0, %(q)s, 0,"
            " now() - g * INTERVAL '1 microsecond', gen_random_uuid(), 'ready', '\\x00'::BYTEA"
            " FROM generate_series(1, %(n)s) AS g",
            {"q": queue, "n": ready},
        )
        self.sql(
            "INSERT INTO shardq_tasks (bucket, queue, rank, exec_time, id, state, payload) SELECT 0, %(q)s, %(r)s,"
            " now() + g * INTERVAL '1 second', gen_random_uuid(), 'scheduled', '\\x00'::BYTEA"
            " FROM generate_series(1, %(n)s) AS g",
            {"q": queue, "r": scheduled_rank, "n": scheduled},
        )

    # -- maintenance ----------------------------------------------------------------------------

    def add_audit_rows(self, days_ago: float, count: int) -> None:
        """``count`` audit rows (a token pausing queue q) written ``days_ago`` days ago."""
        self.sql(
            "INSERT INTO shardq_audit (id, at, actor, action, target)"
            " SELECT gen_random_uuid(), now() - %(days)s::FLOAT8 * INTERVAL '1 day', 'token', 'pause', 'queue q'"
            " FROM generate_series(1, %(count)s::INT8)",
            {"days": days_ago, "count": count},
        )

    def audit_ages_in_days(self) -> list[int]:
        rows = self.sql("SELECT (extract(epoch FROM now() - at) / 86400)::INT8 AS days FROM shardq_audit ORDER BY at")
        return [r["days"] for r in rows]

    def periodic_slots(self) -> list[dict]:
        """Each periodic slot taken (name, slot, task_id), by name and slot."""
        return self.sql("SELECT name, slot, task_id FROM shardq_periodic ORDER BY name, slot")

    def age_periodic_slots(self, seconds: float) -> None:
        """Every periodic slot taken ``seconds`` earlier than it was."""
        self.sql("UPDATE shardq_periodic SET taken_at = taken_at - %(s)s * INTERVAL '1 second'", {"s": seconds})

    def workers(self) -> list[dict]:
        return self.sql("SELECT * FROM shardq_workers")

    def dead_ids(self, queue: str) -> set[str]:
        """The ids (as text) of ``queue``'s dead rows."""
        return {r["id"] for r in self.sql("SELECT id::text AS id FROM shardq_dead WHERE queue = %(q)s", {"q": queue})}

    def count_both_tasks_and_dead(self) -> int:
        """Tasks that have a row in shardq_tasks and in shardq_dead at once (never any)."""
        return self.sql("SELECT count(*) AS n FROM shardq_tasks t JOIN shardq_dead d USING (id)")[0]["n"]

    def count_by_state(self) -> dict[str, int]:
        rows = self.sql("SELECT state, count(*) AS n FROM shardq_tasks GROUP BY state")
        return {r["state"]: r["n"] for r in rows}

    def count_tables_like(self, pattern: str) -> int:
        """Tables whose name is LIKE ``pattern``."""
        return self.sql(
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_name LIKE %(p)s", {"p": pattern}
        )[0]["n"]

    def count_tables_named(self, name: str) -> int:
        return self.sql("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = %(t)s", {"t": name})[0][
            "n"
        ]

    def contents_fingerprint(self) -> tuple:
        """(tasks, queues, dead rows, a digest of every queue row): what a refused call must leave unchanged."""
        row = self.sql(
            "SELECT (SELECT count(*) FROM shardq_tasks) AS t, (SELECT count(*) FROM shardq_queues) AS q,"
            " (SELECT count(*) FROM shardq_dead) AS d,"
            " (SELECT coalesce(md5(string_agg(q::text, ',' ORDER BY name)), '') FROM shardq_queues q) AS qs"
        )[0]
        return row["t"], row["q"], row["d"], row["qs"]

    def count_queues_named(self, name: str) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_queues WHERE name = %(n)s", {"n": name})[0]["n"]

    def outcomes_by_id(self, queue: str) -> tuple[dict[str, dict], dict[str, dict]]:
        """``queue``'s task rows (id as text, state, attempts, last_error, seconds since the lease
        ran out as ``expired_for``) and dead rows (id, attempts, last_error), each by id."""
        rows = self.sql(
            "SELECT id::text AS id, state, attempts, last_error,"
            " extract(epoch FROM now() - lease_expires_at)::float8 AS expired_for"
            " FROM shardq_tasks WHERE queue = %(q)s",
            {"q": queue},
        )
        dead = self.sql(
            "SELECT id::text AS id, attempts, last_error FROM shardq_dead WHERE queue = %(q)s", {"q": queue}
        )
        return {r["id"]: r for r in rows}, {r["id"]: r for r in dead}

    # -- spark ----------------------------------------------------------------------------------

    def count_spark_chunks(self, run_id: str | None = None) -> int:
        """Merged chunks (chunk >= 0) recorded in the Spark ledger, of ``run_id`` when given."""
        if run_id is None:
            return self.sql("SELECT count(*) AS n FROM shardq_spark_chunks WHERE chunk >= 0")[0]["n"]
        return self.sql(
            "SELECT count(*) AS n FROM shardq_spark_chunks WHERE run_id = %(r)s AND chunk >= 0", {"r": run_id}
        )[0]["n"]

    def count_spark_chunk_rows(self, run_id: str) -> int:
        """Every ledger row of ``run_id`` (the run's own row, chunk < 0, too)."""
        return self.sql("SELECT count(*) AS n FROM shardq_spark_chunks WHERE run_id = %(r)s", {"r": run_id})[0]["n"]

    def spark_rows_merged(self, run_id: str, *, merged_only: bool = True) -> dict[int, int]:
        """rows_merged by chunk of ``run_id`` (only merged chunks, chunk >= 0, unless told)."""
        where = " AND chunk >= 0" if merged_only else ""
        rows = self.sql(
            f"SELECT chunk, rows_merged FROM shardq_spark_chunks WHERE run_id = %(r)s{where}", {"r": run_id}
        )
        return {r["chunk"]: r["rows_merged"] for r in rows}

    def spark_progress(self, run_id: str) -> dict:
        """How many chunks of ``run_id`` merged (``n``) and the rows they merged (``t``)."""
        return self.sql(
            "SELECT count(*) AS n, sum(rows_merged) AS t FROM shardq_spark_chunks WHERE run_id = %(r)s AND chunk >= 0",
            {"r": run_id},
        )[0]

    def count_spark_stages(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_spark_stages")[0]["n"]

    def count_spark_runs(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_spark_runs")[0]["n"]

    def spark_run_ids(self) -> set[str]:
        return {r["run_id"] for r in self.sql("SELECT run_id FROM shardq_spark_runs")}

    def add_spark_run(self, run_id: str, queue: str, chunks: int) -> None:
        """A run's ledger row as an older writer left it (its chunk count only)."""
        self.sql(
            "INSERT INTO shardq_spark_runs (run_id, queue, chunks) VALUES (%(r)s, %(q)s, %(c)s)",
            {"r": run_id, "q": queue, "c": chunks},
        )

    def stage_row(self, stage: str, chunk: int, task_id, payload: bytes, dedupe_key: str | None) -> None:
        """One row in the staging table ``stage``."""
        self.sql(
            f'INSERT INTO "{stage}" (chunk, id, payload, dedupe_key) VALUES (%(c)s, %(i)s, %(p)s, %(k)s)',
            {"c": chunk, "i": task_id, "p": payload, "k": dedupe_key},
        )

    def table_names_like(self, pattern: str) -> list[str]:
        return [
            r["t"]
            for r in self.sql(
                "SELECT table_name AS t FROM information_schema.tables WHERE table_name LIKE %(p)s", {"p": pattern}
            )
        ]

    def queue_columns(self, name: str, *columns: str) -> list[dict]:
        return self.sql(f"SELECT {_columns(columns)} FROM shardq_queues WHERE name = %(n)s", {"n": name})

    def first_task_due(self) -> dict:
        """One task row's state, attempts, max_attempts and whether it is due (``due``)."""
        return self.sql("SELECT state, attempts, max_attempts, exec_time <= now() AS due FROM shardq_tasks LIMIT 1")[0]

    def due_later_than(self, payload: bytes, seconds: float) -> list[dict]:
        """For each task row of ``payload``: whether it is due more than ``seconds`` from now (``later``)."""
        return self.sql(
            "SELECT exec_time > now() + %(s)s * INTERVAL '1 second' AS later FROM shardq_tasks WHERE payload = %(p)s",
            {"s": seconds, "p": payload},
        )

    def count_by_exclusive_key(self, queue: str) -> dict[tuple, int]:
        """How many task rows of ``queue`` there are by (exclusive_key, backlogged)."""
        rows = self.sql(
            "SELECT exclusive_key AS k, backlogged, count(*) AS n FROM shardq_tasks WHERE queue = %(q)s GROUP BY 1, 2",
            {"q": queue},
        )
        return {(r["k"], r["backlogged"]): r["n"] for r in rows}

    def running_of_exclusive_key(self, key: str) -> list[dict]:
        """The payloads of the task rows of ``key`` not held back in the backlog."""
        return self.sql("SELECT payload FROM shardq_tasks WHERE exclusive_key = %(k)s AND NOT backlogged", {"k": key})

    def task_ids_of_payload(self, payload: bytes) -> list:
        return [r["id"] for r in self.sql("SELECT id FROM shardq_tasks WHERE payload = %(p)s", {"p": payload})]

    def hidden_columns(self) -> set[str]:
        """The task table's hidden columns (CockroachDB: its shard column)."""
        return {
            r["column_name"]
            for r in self.sql("SELECT column_name FROM [SHOW COLUMNS FROM shardq_tasks] WHERE is_hidden")
        }

    def task_clock(self) -> list[dict]:
        """Each task row's bucket, state, attempts and exec_time with the server's now (for a failure message)."""
        return self.sql("SELECT bucket, state, attempts, exec_time, now() AS now FROM shardq_tasks")

    # -- buckets --------------------------------------------------------------------------------

    def bucket_column_default(self) -> str:
        """The task table's bucket column default, as information_schema shows it."""
        return self.sql(
            "SELECT column_default FROM information_schema.columns"
            " WHERE table_name = 'shardq_tasks' AND column_name = 'bucket'"
        )[0]["column_default"]

    def buckets_row(self) -> dict:
        """shardq_buckets' bucket_count and resizing_from."""
        return self.sql("SELECT bucket_count, resizing_from FROM shardq_buckets")[0]

    def count_tasks_by_bucket(self) -> dict[int, int]:
        return {r["bucket"]: r["n"] for r in self.sql("SELECT bucket, count(*) AS n FROM shardq_tasks GROUP BY bucket")}

    def count_tasks_from_bucket(self, bucket: int) -> int:
        """Task rows in ``bucket`` or any above it."""
        return self.sql("SELECT count(*) AS n FROM shardq_tasks WHERE bucket >= %(b)s", {"b": bucket})[0]["n"]

    def count_lease_records_from_bucket(self, bucket: int) -> int:
        """Lease records of ``bucket`` or any above it (PostgreSQL)."""
        return self.sql("SELECT count(*) AS n FROM shardq_leases WHERE bucket >= %(b)s", {"b": bucket})[0]["n"]

    # -- plan-shaping data for the EXPLAIN checks (PostgreSQL) -----------------------------------

    def add_lease_records_in_flight(self, count: int) -> None:
        """``count`` lease records of claims still in flight elsewhere (queue q, buckets 0 to 3)."""
        self.sql(
            "INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)"
            " SELECT gen_random_uuid(), g %% 4, 'q', now() + interval '1 minute', ARRAY[0::int8], ARRAY[now()],"
            " ARRAY[gen_random_uuid()]"
            " FROM generate_series(1, %(n)s) AS g",
            {"n": count},
        )

    def add_chained_workflows(self) -> None:
        """2,000 workflows of 10 steps chained one after the other (18,000 edges), as
        ``loadtest.workflows`` makes them."""
        self.sql(
            "INSERT INTO shardq_workflow_steps (workflow_id, step, task_id, task, queue, state, waiting_on)"
            " SELECT w.id, 's' || g, gen_random_uuid(), 't', 'q', CASE WHEN g = 0 THEN 'ready' ELSE 'waiting' END,"
            "        least(g, 1)"
            " FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 2000)) AS w CROSS JOIN generate_series(0, 9) AS g"
        )
        self.sql(
            "INSERT INTO shardq_workflow_edges (workflow_id, parent, child)"
            " SELECT workflow_id, step, 's' || (substr(step, 2)::INT + 1) FROM shardq_workflow_steps WHERE step <> 's9'"
        )

    def first_steps_of_chains(self, count: int) -> list[dict]:
        """The workflow ids of ``count`` chains' first steps."""
        return self.sql("SELECT workflow_id FROM shardq_workflow_steps WHERE step = 's0' LIMIT %(n)s", {"n": count})

    def add_ready_and_waiting_tasks(self) -> None:
        """Queue q with 2,000 ready tasks and 20,000 waiting (backlogged) ones, each of a workflow."""
        self.sql("INSERT INTO shardq_queues (name) VALUES ('q') ON CONFLICT DO NOTHING")
        self.sql(
            "INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,"
            "                          workflow_id)"
            " SELECT CASE WHEN g <= 2000 THEN 'ready' ELSE 'waiting' END,"
            "        CASE WHEN g <= 2000 THEN 0 ELSE %(backlog_rank)s END,"
            "        'q', now(), gen_random_uuid(), 0, 0, 3, '\\x00'::BYTEA, gen_random_uuid()"
            " FROM generate_series(1, 22000) AS g",
            {"backlog_rank": RANK_BACKLOG},
        )

    def lease_some_ready(self, count: int) -> list[dict]:
        """``count`` ready tasks leased for a minute; their keys and tokens."""
        return self.sql(
            "UPDATE shardq_tasks SET state = 'leased', lease_token = gen_random_uuid(),"
            "       lease_expires_at = now() + interval '1 minute'"
            " WHERE id IN (SELECT id FROM shardq_tasks WHERE state = 'ready' LIMIT %(n)s)"
            " RETURNING bucket, queue, rank, exec_time, id, lease_token",
            {"n": count},
        )

    def add_step_tasks_and_a_run(self, mark) -> None:
        """Queue q with 20,000 waiting workflow steps' task rows and the 2,000 ready tasks of the
        Spark run ``mark``."""
        self.sql("INSERT INTO shardq_queues (name) VALUES ('q') ON CONFLICT DO NOTHING")
        self.sql(
            "INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,"
            "                          workflow_id)"
            " SELECT 'waiting', %(backlog_rank)s, 'q', now(), gen_random_uuid(), 0, 0, 3, '\\x00'::BYTEA,"
            "        gen_random_uuid()"
            " FROM generate_series(1, 20000)",
            {"backlog_rank": RANK_BACKLOG},
        )
        self.sql(
            "INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,"
            "                          workflow_id)"
            " SELECT 'ready', 0, 'q', now(), gen_random_uuid(), 0, 0, 3, '\\x00'::BYTEA, %(mark)s"
            " FROM generate_series(1, 2000)",
            {"mark": mark},
        )

    def workflow_id_indexes(self) -> list[dict]:
        """The task table's indexes over workflow_id (relname, reltuples)."""
        return self.sql(
            "SELECT c.relname, c.reltuples FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
            " JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = 'shardq_tasks'::regclass AND a.attname = 'workflow_id'"
        )

    # -- dead and history -----------------------------------------------------------------------

    def count_dead(self, queue: str | None = None) -> int:
        if queue is None:
            return self.sql("SELECT count(*) AS n FROM shardq_dead")[0]["n"]
        return self.sql("SELECT count(*) AS n FROM shardq_dead WHERE queue = %(q)s", {"q": queue})[0]["n"]

    def dead_rows(self, *columns: str, queue: str | None = None) -> list[dict]:
        """``columns`` of every dead row (of ``queue`` when given)."""
        if queue is None:
            return self.sql(f"SELECT {_columns(columns)} FROM shardq_dead")
        return self.sql(f"SELECT {_columns(columns)} FROM shardq_dead WHERE queue = %(q)s", {"q": queue})

    def count_history(self, state: str | None = None) -> int:
        if state is None:
            return self.sql("SELECT count(*) AS n FROM shardq_history")[0]["n"]
        return self.sql("SELECT count(*) AS n FROM shardq_history WHERE state = %(s)s", {"s": state})[0]["n"]

    # -- workflows ------------------------------------------------------------------------------

    def count_workflows(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_workflows")[0]["n"]

    def workflow_counts(self) -> list[dict]:
        """The fan-in counters (shard, waiting_on), by shard."""
        return self.sql("SELECT shard, waiting_on FROM shardq_workflow_counts ORDER BY shard")

    def step_states(self, workflow_id) -> list[str]:
        """The workflow's step states, by step name."""
        rows = self.sql(
            "SELECT state FROM shardq_workflow_steps WHERE workflow_id = %(id)s::UUID ORDER BY step",
            {"id": str(workflow_id)},
        )
        return [r["state"] for r in rows]

    def step_of_task(self, task_id, *columns: str) -> list[dict]:
        """``columns`` of the step rows whose task is ``task_id``."""
        return self.sql(
            f"SELECT {_columns(columns)} FROM shardq_workflow_steps WHERE task_id = %(id)s::UUID", {"id": str(task_id)}
        )

    def steps_with_a_shard(self) -> list[str]:
        """The steps that keep the fan-in shard they ack into."""
        return [r["step"] for r in self.sql("SELECT step FROM shardq_workflow_steps WHERE only_shard IS NOT NULL")]

    def forget_shards(self, workflow_id, members: int) -> list[str]:
        """``members`` of the workflow's sharded steps (the first by name) keep no shard, as rows
        written before the column; returns those steps."""
        rows = self.sql(
            "UPDATE shardq_workflow_steps SET only_shard = NULL WHERE workflow_id = %(id)s::UUID "
            "AND step IN (SELECT step FROM shardq_workflow_steps WHERE workflow_id = %(id)s::UUID "
            f"AND only_shard IS NOT NULL ORDER BY step LIMIT {int(members)}) RETURNING step",
            {"id": str(workflow_id)},
        )
        return [r["step"] for r in rows]

    def forget_only_children(self, workflow_id) -> list[str]:
        """The workflow's steps keep no only_child mark, as rows written before the column."""
        rows = self.sql(
            "UPDATE shardq_workflow_steps SET only_child = NULL WHERE workflow_id = %(id)s::UUID RETURNING step",
            {"id": str(workflow_id)},
        )
        return [r["step"] for r in rows]

    # -- durable steps and signals (app/durable.py) ---------------------------------------------

    def durable_steps(self, task_id) -> list[dict]:
        """The task's checkpointed steps (idx, name, value), in order."""
        return self.sql(
            "SELECT idx, name, value FROM shardq_task_steps WHERE task_id = %(id)s ORDER BY idx", {"id": _uuid(task_id)}
        )

    def wake_parked(self, task_id) -> None:
        """A parked task's wake time (its row's and its sleep step's) a second ago, instead of sleeping."""
        params = {"id": _uuid(task_id)}
        self.sql(
            "UPDATE shardq_task_steps SET wake_at = now() - INTERVAL '1 second' "
            "WHERE task_id = %(id)s AND wake_at IS NOT NULL",
            params,
        )
        self.make_due(task_id)

    def count_signals(self, *, consumed: bool | None = None) -> int:
        """Signals stored (only those consumed, or not, when ``consumed`` is given)."""
        if consumed is None:
            return self.sql("SELECT count(*) AS n FROM shardq_task_signals")[0]["n"]
        if consumed:
            return self.sql("SELECT count(*) AS n FROM shardq_task_signals WHERE consumed_at IS NOT NULL")[0]["n"]
        return self.sql("SELECT count(*) AS n FROM shardq_task_signals WHERE consumed_at IS NULL")[0]["n"]

    def count_lock_waiters(self) -> int:
        """Backends waiting on a lock (PostgreSQL): the other side of a race has reached the row."""
        return self.sql("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'")[0]["n"]

    # -- debounce and throttle (lifecycle/debounce.py) ------------------------------------------

    def tasks_by_age(self) -> list[dict]:
        """id, state, payload, exec_time and dedupe_key of every task row, oldest first."""
        return self.sql("SELECT id, state, payload, exec_time, dedupe_key FROM shardq_tasks ORDER BY created_at")

    def make_every_task_due(self) -> None:
        self.sql("UPDATE shardq_tasks SET exec_time = now() - INTERVAL '1 second' WHERE true")

    def make_every_task_ready_now(self) -> None:
        """Every task ready and due a second ago, at rank 0 (as if promoted)."""
        self.sql(
            "UPDATE shardq_tasks SET exec_time = now() - INTERVAL '1 second', state = 'ready', rank = 0 WHERE true"
        )

    def hand_back_every_task(self) -> None:
        """Every task ready again without its lease token (its claim was not the test's)."""
        self.sql("UPDATE shardq_tasks SET state = 'ready', lease_token = NULL WHERE true")

    def count_throttle_windows(self) -> int:
        return self.sql("SELECT count(*) AS n FROM shardq_throttle_windows")[0]["n"]

    def end_throttle_windows(self) -> None:
        """Every throttle window ended a second ago."""
        self.sql("UPDATE shardq_throttle_windows SET until = now() - INTERVAL '1 second' WHERE true")


def backend_pid(session) -> int:
    """The server process behind ``session`` (PostgreSQL)."""
    return session.execute_raw("SELECT pg_backend_pid() AS pid")[0]["pid"]


def synchronous_commit(session) -> str:
    """The synchronous_commit setting ``session``'s transaction will commit with (PostgreSQL)."""
    return session.execute_raw("SELECT current_setting('synchronous_commit') AS mode")[0]["mode"]


def count_tasks_on(conn) -> int:
    """Task rows seen from a psycopg connection of the test's own."""
    return conn.execute("SELECT count(*) FROM shardq_tasks").fetchone()[0]


def count_tasks_in(session, payload: str | None = None) -> int:
    """Task rows (of ``payload`` when given) seen on ``session``, retried on 40001."""
    from tests.support.factories import probe

    if payload is None:
        return probe(session, "SELECT count(*) AS n FROM shardq_tasks")[0]["n"]
    return probe(session, "SELECT count(*) AS n FROM shardq_tasks WHERE payload = %(p)s", {"p": payload.encode()})[0][
        "n"
    ]


def count_dead_in(session) -> int:
    from tests.support.factories import probe

    return probe(session, "SELECT count(*) AS n FROM shardq_dead")[0]["n"]


def task_states_in(session) -> list[str]:
    from tests.support.factories import probe

    return [r["state"] for r in probe(session, "SELECT state FROM shardq_tasks")]


def terminate_sessions_named(session, application_name: str) -> int:
    """End every other client backend of this database with ``application_name``; how many (PostgreSQL)."""
    return session.execute_raw(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = %(a)s"
        " AND backend_type = 'client backend'",
        {"a": application_name},
    )[0]["n"]


# -- on a psycopg connection of the test's own (PostgreSQL lock tests) --------------------------


def lock_waiters(conn) -> int:
    """Backends of this database waiting on a lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return int(row[0]) if row else 0


def waits_on_a_lock(conn, pid: int) -> bool:
    """Whether backend ``pid`` waits on a lock."""
    row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def lock_step(conn, step: str, workflow_id=None) -> None:
    """Take the row lock of step ``step`` (of ``workflow_id`` when given) in ``conn``'s open transaction."""
    if workflow_id is None:
        conn.execute("SELECT 1 FROM shardq_workflow_steps WHERE step = %s FOR UPDATE", (step,))
    else:
        conn.execute(
            "SELECT 1 FROM shardq_workflow_steps WHERE workflow_id = %s AND step = %s FOR UPDATE", (workflow_id, step)
        )


def lock_task(conn, task_id) -> None:
    """Take the task row's lock in ``conn``'s open transaction."""
    conn.execute("SELECT 1 FROM shardq_tasks WHERE id = %s FOR UPDATE", [task_id])


def insert_waiting_children(conn, workflow_id: uuid.UUID, parents: list[str], children: list[str]) -> None:
    """Steps ``children`` of the workflow, each waiting on all of ``parents`` (with their edges)."""
    conn.execute(
        "INSERT INTO shardq_workflow_steps (workflow_id, step, task_id, task, queue, state, waiting_on)"
        " SELECT %s, c, gen_random_uuid(), 't', 'default', 'waiting', %s FROM unnest(%s::TEXT[]) AS c",
        (workflow_id, len(parents), children),
    )
    conn.execute(
        "INSERT INTO shardq_workflow_edges (workflow_id, parent, child)"
        " SELECT %s, p, c FROM unnest(%s::TEXT[]) AS p, unnest(%s::TEXT[]) AS c",
        (workflow_id, parents, children),
    )


def insert_unrelated_steps(conn, count: int) -> None:
    """``count`` waiting steps of as many other workflows, as in a busy database."""
    conn.execute(
        "INSERT INTO shardq_workflow_steps (workflow_id, step, task_id, task, queue, state, waiting_on)"
        " SELECT gen_random_uuid(), 'x', gen_random_uuid(), 't', 'default', 'waiting', 1"
        " FROM generate_series(1, %s)",
        (count,),
    )
