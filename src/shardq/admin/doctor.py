"""``shardq doctor``: whether a database gives shardq what it needs, checked before first use.

:func:`diagnose` connects to any database and returns a :class:`Diagnosis`, a checklist:

* **server** — the engine and its version against the supported range (a server older than the
  engine supports is refused at connect: :class:`~shardq.errors.UnsupportedServer`);
* **session** — the session defaults shardq depends on (transactions that are not read-only);
* **schema** — the migration revision against the newest this shardq ships;
* **layout** — the bucket count and, on CockroachDB, the hash-sharded key's shard column;
* **privileges** — what ``migrate`` (CREATE on the schema), ``work`` (SELECT, INSERT, UPDATE,
  DELETE on every shardq table) and ``buckets resize`` (PostgreSQL: owning the tasks table;
  CockroachDB: reading its schema-change jobs) need;
* **plans** — every named statement the engine can send, planned on this server with
  representative values (:mod:`shardq.admin.explain_checks`), flagged when it reads a whole table (but
  for the housekeeping reads that do so by design, each shown with its reason), fans out over
  buckets, or locks with SKIP LOCKED in a scan no hard limit bounds.

Guarantees
    * Nothing is written: the checks are reads, and every plan is asked for with ``EXPLAIN``
      (never ``EXPLAIN ANALYZE``: planned, not run) inside a transaction that is rolled back
      (:meth:`shardq.sessions.session.Session.rolled_back`).
    * :attr:`Diagnosis.ok` is True only when every check holds; each failed check is one line.

Does not
    * run the resize sequence or any statement for real: a plan is the optimizer's choice for
      these values on this data, not a measurement;
    * check CockroachDB's privilege to ALTER PRIMARY KEY (only that its job list is readable).

Errors: an unreachable server or a refused login raises
:class:`~shardq.errors.DatabaseUnavailable`, an unsupported version
:class:`~shardq.errors.UnsupportedServer`; anything a check itself hits becomes a failed check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shardq import operations
from shardq.admin import explain_checks
from shardq.errors import DatabaseError, NotMigrated
from shardq.migrations import apply as migrate
from shardq.models.layout import ShardLayout
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sql.plan import Call, single

#: Tables ``shardq work`` reads and writes (those of them the engine's migrations create).
WORKER_TABLES = (
    "shardq_tasks",
    "shardq_dead",
    "shardq_queues",
    "shardq_stats",
    "shardq_periodic",
    "shardq_slots",
    "shardq_rate_tokens",
    "shardq_leases",
    "shardq_buckets",
    "shardq_spark_runs",
    "shardq_spark_chunks",
    "shardq_spark_stages",
    "shardq_history",
    "shardq_attempts",
    "shardq_listeners",
    "shardq_workers",
    "shardq_stats_hourly",
    "shardq_workflows",
    "shardq_workflow_steps",
    "shardq_workflow_edges",
)


NOT_PLANNED = "not planned"


@dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    area: str
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.area}: {self.name}: {self.detail}"


@dataclass(frozen=True)
class Diagnosis:
    """The checklist for one database."""

    engine: str
    server: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def problems(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def lines(self) -> list[str]:
        """Every check but the plans that hold plainly, which are summed up in one line; a plan
        that holds because it reads whole tables by design is shown, with why."""
        planned = [c for c in self.checks if c.area == "plans" and c.name != NOT_PLANNED]
        shown = [c.line() for c in self.checks if c.area != "plans" or not c.ok or c.detail != "ok"]
        good = sum(c.ok for c in planned)
        designed = sum(c.ok and c.detail != "ok" for c in planned)
        if planned:
            shown.append(
                f"{'ok  ' if good == len(planned) else 'FAIL'} plans: {good} of {len(planned)} statements "
                "planned without a full scan"
                + (f" ({designed} by design, above)" if designed else "")
                + ", a fan-out over buckets or an unbounded SKIP LOCKED"
            )
        return shown

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "engine": self.engine,
            "server": self.server,
            "checks": [asdict(check) for check in self.checks],
        }


def diagnose(dsn: Dsn) -> Diagnosis:
    """The checklist for the database ``dsn`` names (see the module documentation)."""
    with Session(dsn, application_name="shardq-doctor") as session:
        engine = session.engine  # connects: unreachable, refused and unsupported servers raise here
        server = session.parameter_status("crdb_version") or f"PostgreSQL {session.parameter_status('server_version')}"
        checks = [Check("server", engine.name, True, f"{server.split('(')[0].strip()} ({engine.supported_versions})")]
        checks += _session_checks(session)
        revision = _revision_check(session)
        checks.append(revision)
        layout = _layout(session, checks)
        checks += _privilege_checks(session)
        if layout is None:
            checks.append(Check("plans", NOT_PLANNED, False, "the tasks table has no layout: run `shardq migrate`"))
        else:
            checks += _plan_checks(session, layout)
        return Diagnosis(engine.name, server, tuple(checks))


def _attempt(area: str, name: str, probe: Callable[[], Check]) -> Check:
    try:
        return probe()
    except DatabaseError as exc:
        return Check(area, name, False, str(exc).splitlines()[0])


def _session_checks(session: Session) -> list[Check]:
    row = session.run(single(Call("doctor_settings", rows="one")))
    assert row is not None
    read_only = str(row["read_only"]).lower() in ("on", "true")
    return [
        Check("session", "user", True, f"{row['user_name']} in schema {row['schema_name']}"),
        Check(
            "session",
            "default_transaction_read_only",
            not read_only,
            "on: shardq could not write (ALTER ROLE … SET default_transaction_read_only = off)" if read_only else "off",
        ),
        Check(
            "session",
            "default_transaction_isolation",
            True,
            f"{row['isolation']} (shardq pins the isolation it needs per transaction)",
        ),
    ]


def _revision_check(session: Session) -> Check:
    head = migrate.head_revision()

    def probe() -> Check:
        row = session.run(single(Call("doctor_schema_revision", rows="one")))
        found = row["version_num"] if row else None
        return Check(
            "schema",
            "revision",
            found == head,
            f"{found} (newest {head})"
            if found == head
            else f"{found or 'none'}, newest is {head}: run `shardq migrate`",
        )

    try:
        return probe()
    except NotMigrated:
        return Check("schema", "revision", False, f"not migrated (newest {head}): run `shardq migrate`")


def _layout(session: Session, checks: list[Check]) -> ShardLayout | None:
    try:
        layout = session.run(operations.layout())
    except DatabaseError as exc:
        checks.append(Check("layout", "buckets", False, str(exc).splitlines()[0]))
        return None
    checks.append(
        Check(
            "layout",
            "buckets",
            True,
            str(layout.bucket_count) + (f" (shrinking from {layout.resizing_from})" if layout.resizing_from else ""),
        )
    )
    if layout.shard_column is not None:
        checks.append(Check("layout", "shard column", True, layout.shard_column))
    return layout


def _privilege_checks(session: Session) -> list[Check]:
    def create() -> Check:
        row = session.run(single(Call("doctor_schema_create", rows="one")))
        allowed = bool(row and row["can_create"])
        return Check(
            "privileges",
            "migrate",
            allowed,
            "CREATE on the schema"
            if allowed
            else "no CREATE on the schema: `shardq migrate` cannot create or change tables",
        )

    def work() -> Check:
        rows = session.run(single(Call("doctor_table_privileges", {"tables": list(WORKER_TABLES)})))
        if not rows:
            return Check("privileges", "work", False, "no shardq tables in this schema")
        missing = [
            f"{row['table_name']} ({', '.join(p for p in ('select', 'insert', 'update', 'delete') if not row['can_' + p])})"
            for row in rows
            if not all(row["can_" + p] for p in ("select", "insert", "update", "delete"))
        ]
        return Check(
            "privileges",
            "work",
            not missing,
            f"SELECT, INSERT, UPDATE, DELETE on {len(rows)} tables"
            if not missing
            else "missing on " + "; ".join(missing),
        )

    def resize() -> Check:
        if "doctor_tasks_owned" in session.engine.statements():
            row = session.run(single(Call("doctor_tasks_owned", rows="one")))
            if not (row and row["owned"]):
                return Check(
                    "privileges", "resize", False, "not the owner of shardq_tasks: `buckets resize` cannot alter it"
                )
        jobs = session.run(session.engine.schema_jobs())
        return Check("privileges", "resize", True, f"allowed ({len(jobs)} schema change(s) of shardq_tasks running)")

    return [
        _attempt("privileges", "migrate", create),
        _attempt("privileges", "work", work),
        _attempt("privileges", "resize", resize),
    ]


def _plan_checks(session: Session, layout: ShardLayout) -> list[Check]:
    engine = session.engine
    setup = "doctor_plan_setup" in engine.statements()
    checks = []
    for name, statement in explain_checks.planned(engine).items():
        values = explain_checks.example_values(statement)

        def plan_of(s: Session, name: str = name, values: dict[str, Any] = values) -> str:
            if setup:
                s.run(single(Call("doctor_plan_setup", rows="none")))
            return s.explain(name, values)

        try:
            plan = session.rolled_back(plan_of)
        except DatabaseError as exc:
            checks.append(Check("plans", name, False, f"cannot be planned: {str(exc).splitlines()[0]}"))
            continue
        found = explain_checks.problems(engine, name, statement, plan, layout.bucket_count)
        design = None if found else explain_checks.by_design(engine, name, plan)
        checks.append(
            Check("plans", name, not found, ", ".join(found) if found else f"ok: {design}" if design else "ok")
        )
    return checks
