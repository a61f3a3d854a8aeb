"""A worker process's runtime: claim in batches, run handlers, settle in batches.

Parts (each in its own module, each with its own database session used only by its own thread)
    * the **fetcher** (:mod:`.fetcher`, on the thread that calls :meth:`Worker.run`) claims rounds
      round-robin over the buckets and listens for wake-ups;
    * the **executor** (:mod:`.executor`) runs handlers, at most ``concurrency`` at once: sync
      handlers on threads, ``async def`` handlers as coroutines on one event loop (sync tasks of an
      app that also has async ones run on a pool of ``concurrency`` threads beside them);
      with ``shares`` (``--share emails=8``) each queue with a share gets that many handlers and
      part of the prefetch of its own, the other queues the rest (:mod:`.shares`);
    * the **settler** (:mod:`.settler`) acks, retries, dead-letters and hands back in batches, and
      records activity counters;
    * the **lease keeper** (:mod:`.lease_keeper`, with ``heartbeat``) renews running tasks' leases;
    * the **lease sweeper** (:mod:`shardq.maintenance.lease_sweeper`, unless ``sweep`` is off) returns crashed
      workers' expired leases to the queue, each worker taking turns at a share of the buckets.
    They share only memory (:mod:`.inflight`): which tasks are held, and the counters that pace
    claims. Failures are decided by :func:`shardq.lifecycle.failures.settle_failures`, as in the reaper.

Outcomes
    The handler gets a :class:`shardq.Task`. Returning acks it (the row is deleted). Raising
    :class:`shardq.Permanent` dead-letters it at once; :class:`shardq.Retry` runs it again after
    ``in_seconds`` without using an attempt; any other exception retries it after exponential
    backoff with full jitter, or dead-letters it when that was its last attempt.

Guarantees
    * At-least-once: a task is deleted only after its handler returned. A task whose lease expired
      and was handed to another worker cannot be acked, retried or extended by this one (every
      statement is fenced by the lease token); such a stale ack changes nothing and is counted and
      logged as ``lease_lost``.
    * Graceful stop (SIGTERM, SIGINT, :meth:`Worker.stop`, or ``until_empty``): no new claims;
      claimed tasks that have not started are handed back at once (ready again, attempt refunded,
      no wait for lease expiry); running handlers get ``grace_seconds`` to finish; any still running
      then are handed back too before the process leaves (async ones are cancelled).
    * A task whose lease ran out while it waited in this worker's prefetch buffer is handed back
      instead of being started (it may already be running elsewhere).
    * An async handler that blocks the event loop for ``blocked_loop_seconds`` (0.5 s) or more is
      logged at WARNING on ``shardq.worker`` with its task id and queue, once per block.
    * Without any ``shardq reap`` process, a crashed worker's tasks come back within their lease
      plus about 3 s (see :mod:`shardq.maintenance.lease_sweeper`); ``until_empty`` sweeps every bucket before it
      reports done, and runs the tasks of its queues that sweep put back.
    * While it runs, the garbage collector's youngest generation is collected once the worker has
      turned its in-flight tasks over many times, not several times per batch (``gc_tuning``, on:
      :mod:`.collector`; the threshold is only raised, and restored when the last worker stops).
    * Whatever a handler raises is stored as text the database accepts (:mod:`shardq.error_text`);
      an outcome the database refuses is settled alone, so the others of its batch still are.

Does not
    * kill a sync handler's thread: Python cannot. A handler that outlives its lease keeps running,
      but its outcome is discarded if the task was reaped; use ``task.extend()`` or ``heartbeat``.

Introspection
    * ``on_event(event, task, details)`` is called for every ``claimed``, ``handled`` (details:
      ``seconds``, ``outcome``), ``acked``, ``retried``, ``dead``, ``released`` and
      ``lease_lost`` task, and once per claim call with ``claim`` (task None; details ``polls``:
      one (bucket, queue, seconds, tasks found) per claim statement), and once per settled batch
      with ``settled`` (task None; details ``counts``: {(event, queue): n} of the acked, retried,
      dead, released and lease_lost tasks in it). :mod:`shardq.worker.metrics` hangs Prometheus metrics
      on it. It runs on the worker's own threads: keep it cheap. ``events`` (optional) names the
      events the hook wants; per-task events nobody wants are then not even built.
    * Every such task event is also logged on ``shardq.worker`` with ``extra`` fields ``event``,
      ``task_id``, ``queue``, ``bucket``, ``attempt``: ``claimed``/``handled``/``acked``/
      ``released`` at DEBUG, ``retried``/``dead`` at INFO, ``lease_lost`` at WARNING.
    * Acks, retries, dead letters, handler time and offered handler capacity are gathered in
      memory and added to ``shardq_stats`` every ``stats_interval`` seconds (one statement per
      flush, not per task) for ``shardq stats``' rates and lead time.

Options: the fields of :class:`WorkerConfig`, whose defaults are the constants in
:mod:`.config` (``concurrency`` 4, ``batch`` 100, ``prefetch`` = batch, ``lease_seconds`` per
queue, ``grace_seconds`` 30, ``idle_min``/``idle_max`` 0.05 s / 1.0 s, ``ack_batch`` 1000,
``heartbeat`` off, ``until_empty`` off, ``sweep`` on, ``gc_tuning`` on, ``stats_interval`` 2 s, ``statement_timeout`` 10 s (the
server cancels a statement of the worker's sessions after this long; a cancelled claim or settle is
retried with backoff like a lost connection), ``listen`` on (on PostgreSQL an idle fetcher waits
for a producer's wake-up instead of sleeping; see :mod:`shardq.lifecycle.notify`), ``blocked_loop_seconds``
0.5).
"""

from __future__ import annotations

from shardq.models.tasks import Task
from shardq.worker.config import STATEMENT_TIMEOUT_DEFAULT, WorkerConfig, WorkerTotals
from shardq.worker.contract import Application, Handler, Resolver
from shardq.worker.runtime import Worker, runs_on_loop

__all__ = [
    "STATEMENT_TIMEOUT_DEFAULT",
    "Application",
    "Handler",
    "Resolver",
    "Task",
    "Worker",
    "WorkerConfig",
    "WorkerTotals",
    "runs_on_loop",
]
