"""Prometheus metrics for a worker process (``shardq work --metrics-port P``).

:class:`WorkerMetrics` turns the worker's ``on_event`` callbacks into metrics in its own
:class:`prometheus_client.CollectorRegistry` (never the global default one, so several workers in
one process, or in one test run, keep separate numbers), and :meth:`WorkerMetrics.serve` exposes
them over HTTP at ``/metrics`` (any path answers).

Metrics (all labelled ``queue`` unless said otherwise)
    ``shardq_tasks_claimed_total``, ``shardq_tasks_acked_total``, ``shardq_tasks_retried_total``,
    ``shardq_tasks_dead_total`` (dead-lettered), ``shardq_tasks_released_total`` (handed back at
    shutdown), ``shardq_tasks_lease_lost_total`` (outcomes refused because the lease had passed
    on); ``shardq_claim_duration_seconds`` (histogram, one observation per claim statement,
    empty ones included); ``shardq_handler_duration_seconds`` (histogram, one per handler run);
    ``shardq_empty_polls_total`` (claim statements that found nothing); and
    ``shardq_bucket_claims_total`` (label ``bucket`` only: tasks claimed per bucket, which shows
    skew between buckets).

Guarantees: counters only grow for the life of the process (Prometheus computes rates); a broken
metric never breaks the worker (the worker swallows and logs hook errors). Does not: push
anywhere, or aggregate across processes (that is Prometheus's job: sum by queue)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from shardq.models.tasks import ClaimedTask

CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


HANDLER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


# worker event -> counter name (without the _total suffix Prometheus adds)
_OUTCOME_COUNTERS = {
    "acked": ("shardq_tasks_acked", "Tasks whose handler returned and that were deleted."),
    "retried": ("shardq_tasks_retried", "Failed attempts put back to ready with backoff."),
    "dead": ("shardq_tasks_dead", "Tasks moved to the dead-letter table."),
    "released": ("shardq_tasks_released", "Claimed tasks handed back unrun (shutdown, expired in the buffer)."),
    "lease_lost": ("shardq_tasks_lease_lost", "Outcomes the database refused because the lease had passed on."),
    "timeouts": ("shardq_tasks_timed_out", "Attempts settled as failed because they ran past their timeout."),
}


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    host: str
    port: int
    _server: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class WorkerMetrics:
    """Prometheus metrics fed by :meth:`on_event` (pass it as the worker's ``on_event``, and
    :attr:`EVENTS` as its ``events`` so the worker skips the per-task events it does not use).

    ``queues`` (optional) are the worker's queues: their series are created at zero up front, so a
    counter that never moved is exported as 0 rather than missing (Prometheus' ``rate()`` and
    alerts on absent series behave better that way)."""

    #: the worker events :meth:`on_event` uses
    EVENTS = frozenset({"claim", "handled", "settled"})

    def __init__(self, registry: CollectorRegistry | None = None, *, queues: Sequence[str] = ()) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.claimed = Counter("shardq_tasks_claimed", "Tasks leased by this worker.", ["queue"], registry=r)
        self.outcomes = {
            event: Counter(name, text, ["queue"], registry=r) for event, (name, text) in _OUTCOME_COUNTERS.items()
        }
        self.claim_seconds = Histogram(
            "shardq_claim_duration_seconds",
            "Latency of one claim statement (one queue, one bucket).",
            ["queue"],
            buckets=CLAIM_BUCKETS,
            registry=r,
        )
        self.handler_seconds = Histogram(
            "shardq_handler_duration_seconds",
            "Time one handler run took.",
            ["queue"],
            buckets=HANDLER_BUCKETS,
            registry=r,
        )
        self.empty_polls = Counter(
            "shardq_empty_polls", "Claim statements that found no due task.", ["queue"], registry=r
        )
        self.bucket_claims = Counter("shardq_bucket_claims", "Tasks claimed from each bucket.", ["bucket"], registry=r)
        self.throttled = Counter(
            "shardq_claims_throttled",
            "Claims a queue's concurrency or rate limit refused (shardq.lifecycle.flow).",
            ["queue"],
            registry=r,
        )
        # labels() takes a lock and hashes the label tuple on every call; the children are
        # cached here so the per-task cost is one dict lookup and one observation.
        self._children: dict[tuple[int, object], Any] = {}
        for queue in queues:
            for metric in (
                self.claimed,
                *self.outcomes.values(),
                self.claim_seconds,
                self.handler_seconds,
                self.empty_polls,
                self.throttled,
            ):
                self._child(metric, queue)

    def _child(self, metric: Any, label: object) -> Any:
        key = (id(metric), label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(str(label))
        return child

    def on_event(self, event: str, task: ClaimedTask | None, details: dict) -> None:
        """The worker's ``on_event`` hook. Counters move once per claim call (``claim``) and
        once per settled batch (``settled``), not per task; only the handler-duration histogram
        takes one observation per task (``handled``)."""
        if event == "handled":
            self._child(self.handler_seconds, task.queue).observe(details["seconds"])  # type: ignore[union-attr]
        elif event == "claim":
            for bucket, queue, seconds, found in details.get("polls", ()):
                if seconds is not None:  # None: more buckets of one round-claim statement
                    self._child(self.claim_seconds, queue).observe(seconds)
                if found:
                    self._child(self.claimed, queue).inc(found)
                    self._child(self.bucket_claims, bucket).inc(found)
                else:
                    self._child(self.empty_polls, queue).inc()
            for queue in details.get("throttled", ()):
                self._child(self.throttled, queue).inc()
        elif event == "settled":
            for (outcome, queue), count in details.get("counts", {}).items():
                if outcome in self.outcomes:
                    self._child(self.outcomes[outcome], queue).inc(count)

    def serve(self, port: int, host: str = "0.0.0.0") -> MetricsServer:
        """Serve this registry over HTTP on ``host:port`` (port 0: any free port) from a daemon
        thread. Returns the server; read ``.port`` for the port actually bound."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(host, server.server_port, server)
