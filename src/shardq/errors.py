"""shardq's one error hierarchy.

Every error shardq raises derives from :class:`ShardqError`; the class docstring is the
default message. Errors about what a caller passed in also derive from ``ValueError``.
Database errors never leave the package as psycopg types: :mod:`shardq.sessions.session` translates
them and keeps the original as ``__cause__``.
"""

from __future__ import annotations


class ShardqError(Exception):
    """shardq failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidInput(ShardqError, ValueError):
    """An argument is not acceptable (queue name, payload, delay, count, DSN ...)."""


class InvalidHandler(InvalidInput):
    """The handler specification does not name an importable callable."""


class UnsupportedServer(InvalidInput):
    """The database server is a version shardq does not support."""


class DatabaseError(ShardqError):
    """The database refused or failed a statement."""

    #: True for failures that say nothing about the statement itself (a lost connection, a
    #: timeout, a conflict): the same statement may well succeed later. Workers and reapers retry
    #: these with backoff. Whether re-sending is *safe* is another matter (see AmbiguousResult).
    transient = False


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached, or the connection to it was lost."""

    transient = True


class StatementTimeout(DatabaseError):
    """The database cancelled the statement: it ran past the session's statement timeout (or an
    operator cancelled it). Nothing it would have changed was changed."""

    transient = True


class SerializationConflict(DatabaseError):
    """A transaction kept failing with SQLSTATE 40001 after every retry allowed."""

    transient = True


class AmbiguousResult(DatabaseError):
    """The database could not say whether a statement committed (SQLSTATE 40003)."""

    transient = True


class NotMigrated(DatabaseError):
    """The shardq tables (or a column this shardq reads) do not exist here yet: run `shardq migrate` first."""


class ShardLayoutChanged(DatabaseError):
    """The bucket layout changed under a statement (CockroachDB: the shard column it filtered on
    was dropped by a resize); re-discover the layout and run it again."""

    transient = True


class LockTimeout(DatabaseError):
    """A statement gave up waiting for a lock (lock_timeout)."""

    transient = True


class ResizeInProgress(ShardqError):
    """Another bucket resize (or schema change of shardq_tasks) is running; wait for it to finish."""


class QueuePaused(ShardqError):
    """The queue is paused for this operation."""


class TaskNotFound(ShardqError):
    """No such task."""


class LeaseLost(ShardqError):
    """The task's lease expired and it was handed to someone else (or finished)."""


class ResultNotStorable(ShardqError):
    """A task's return value cannot be kept (not JSON-encodable, or over the size limit): the
    attempt fails with this one line, like any handler error."""


class TaskFailed(ShardqError):
    """The task waited for did not succeed; ``status`` is its :class:`shardq.models.history.TaskStatus`."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status


class TaskDead(TaskFailed):
    """The task waited for was dead-lettered (its last error is in the message)."""


class TaskCancelled(TaskFailed):
    """The task waited for was cancelled."""


class OutcomeNotKept(TaskFailed):
    """The task waited for finished, but its queue keeps no finished tasks, so how is unknown
    (``shardq queue set Q --keep-finished DURATION``)."""


class WaitTimeout(ShardqError, TimeoutError):
    """Waiting for a task's outcome took longer than the timeout; the task itself is left alone."""


class EmbeddedServerError(ShardqError):
    """The embedded PostgreSQL server could not be started or stopped."""


class Permanent(Exception):
    """Raise from a handler to send the task to the dead-letter table at once.

    Any other exception from a handler retries the task with backoff until its attempts
    are used up. ``Permanent`` is deliberately not a :class:`ShardqError`: it is raised by
    user code, not by shardq.
    """


class Retry(Exception):
    """Raise from a handler to run the task again in ``in_seconds`` without using an attempt.

    The task goes back to the queue as scheduled (or ready at once for 0) with its attempt
    refunded, so a task that keeps asking to be retried is never dead-lettered for it. Like
    :class:`Permanent`, it is user code's request, not a :class:`ShardqError`.
    """

    def __init__(self, in_seconds: float = 0.0, reason: str = "") -> None:
        if isinstance(in_seconds, bool) or not isinstance(in_seconds, (int, float)) or not in_seconds >= 0:
            raise InvalidInput("Retry(in_seconds=…) must be a number of seconds, 0 or more")
        self.in_seconds = float(in_seconds)
        self.reason = reason
        super().__init__(reason or f"retry requested in {self.in_seconds:g} s")


class SparkSetupError(ShardqError):
    """Spark cannot run the bulk enqueue here: pyspark, Java 17+ or the PostgreSQL JDBC driver is missing."""


class InvalidTaskFrame(InvalidInput):
    """The DataFrame does not fit the task column mapping (a missing column, a wrong type, or a bad value)."""


class TaskNotLive(InvalidInput):
    """A signal names no live task: an unknown id, or a task that has finished."""


class StepMismatch(ShardqError):
    """A durable task's steps differ from the ones it recorded (its code changed between runs
    without a new ``version=``): the attempt fails with this one line naming the first mismatch."""


class StepNotStorable(ShardqError):
    """A step's value (or a signal's payload) cannot be recorded: not JSON-encodable, or over the
    size limit. The attempt fails with this one line naming the step and the type or size."""


class SignalTimeout(ShardqError, TimeoutError):
    """``ctx.wait_for(name, timeout=…)`` saw no signal before its timeout (recorded as the step's
    outcome: a replay raises it again)."""


class Parked(Exception):
    """Raised by a durable task's ``sleep``/``wait_for`` once the task has been put back to sleep
    in the database (scheduled at ``until``, holding no lease): the worker settles nothing more
    for this run. Do not catch it in a handler (as :class:`Retry`, it ends the run)."""

    def __init__(self, until: object, reason: str) -> None:
        self.until = until
        self.reason = reason
        super().__init__(reason)
