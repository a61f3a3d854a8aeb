"""Two acks that count off the same children at once, on two connections (PostgreSQL row locks):
the children's rows are locked in one order by every ack, so they queue and never deadlock."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from shardq.sql import statements_for
from tests.support.probes import insert_unrelated_steps, insert_waiting_children, lock_step, waits_on_a_lock
from tests.support.workflows import _until

FAN_INS = 50  # fan-ins over the same two parents: each parent's ack counts off all of them
OTHER = 5000  # children of another workflow acked in the same batch as the second parent


_insert_children = insert_waiting_children
_waiting_on_a_lock = waits_on_a_lock


def _order(conn, statement: str, parents: list[tuple[uuid.UUID, str]], workflow_id: uuid.UUID) -> list[str]:
    """The children of ``workflow_id`` in the order the statement updates them, rolled back."""
    rows = conn.execute(statement, {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]})
    order = [r[1] for r in rows.fetchall() if r[0] == workflow_id]
    conn.rollback()
    return order


def _row_to_hold(first: list[str], second: list[str]) -> str:
    """A child to hold locked so that, if the two acks locked their rows in the orders their
    updates report, the first would stop holding rows the second needs while the second takes
    rows the first needs after the held one: a deadlock once it is let go. Locking in one order
    leaves no such row; then any row does (the middle one)."""
    for i, held in enumerate(first):
        taken_by_first = set(first[:i]) | {held}
        taken_by_second = []
        for row in second:
            if row in taken_by_first:
                break
            taken_by_second.append(row)
        if set(taken_by_second) & set(first[i + 1 :]):
            return held
    return first[len(first) // 2]


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_two_parents_acked_at_once_on_two_connections_count_off_shared_fan_ins_without_deadlock(db):
    advance = statements_for("postgresql")["workflow_children_advance"].text
    wide, other = db.make_workflow({"p0": "succeeded", "p1": "succeeded"}), db.make_workflow({"q": "succeeded"})
    children = [f"c{i:03d}" for i in range(FAN_INS)]
    with psycopg.connect(db.dsn.conninfo, autocommit=True) as conn:
        # Unrelated steps, as in a busy database: the planner probes the key, not the whole table.
        insert_unrelated_steps(conn, 250000)
        with conn.transaction():
            _insert_children(conn, wide, ["p0", "p1"], children)
            _insert_children(conn, other, ["q"], [f"o{i:04d}" for i in range(OTHER)])
        conn.execute("ANALYZE shardq_workflow_steps")
        conn.execute("ANALYZE shardq_workflow_edges")

    holder = psycopg.connect(db.dsn.conninfo)
    first, second = psycopg.connect(db.dsn.conninfo), psycopg.connect(db.dsn.conninfo)
    watcher = psycopg.connect(db.dsn.conninfo, autocommit=True)
    errors: list[BaseException] = []
    released: list[list[str]] = []

    def ack(conn, parents: list[tuple[uuid.UUID, str]]) -> None:
        # At SERIALIZABLE the ack that waited is cancelled with 40001 once the other commits, and
        # runs again, as the library's acks do; a deadlock (40P01) is never retried.
        for attempt in range(1, 6):
            try:
                rows = conn.execute(
                    advance, {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]}
                ).fetchall()
                conn.commit()
                released.append([r[1] for r in rows if r[0] == wide and r[3] == "ready"])
                return
            except psycopg.errors.SerializationFailure as exc:
                conn.rollback()
                if attempt == 5:
                    errors.append(exc)
            except psycopg.Error as exc:
                errors.append(exc)
                conn.rollback()
                return

    acks = [(wide, "p0")], [(other, "q"), (wide, "p1")]
    try:
        # Hold one fan-in so the first ack stops partway through its children.
        oa, ob = _order(first, advance, acks[0], wide), _order(second, advance, acks[1], wide)
        held = _row_to_hold(oa, ob)
        lock_step(holder, held, wide)
        one = threading.Thread(target=ack, args=(first, acks[0]))
        one.start()
        _until(lambda: _waiting_on_a_lock(watcher, first.info.backend_pid))
        two = threading.Thread(target=ack, args=(second, acks[1]))
        two.start()
        _until(lambda: _waiting_on_a_lock(watcher, second.info.backend_pid))
        holder.rollback()
        one.join(60)
        two.join(60)
    finally:
        for conn in (holder, first, second, watcher):
            conn.close()
    assert not errors, errors
    # Exactly one of the two acks released each fan-in, and every fan-in was released.
    assert sorted(released[0] + released[1]) == children
