"""A consumer on CockroachDB when a resize swaps the shard column under it, against the recorded
CockroachDB (:mod:`tests.support.recorded_cockroach`): the claim that names the dropped column
fails with 42703, the consumer re-discovers the layout, and its next claim walks the new buckets
with the new column. Answers: :mod:`tests.support.cockroach_answers` (``hash_sharded_index``)."""

from __future__ import annotations

import uuid

import pytest

from shardq.lifecycle.claim import Consumer
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from tests.support.cockroach_answers import (
    CLAIM_COLUMNS,
    QUEUE_COLUMNS,
    SHARD_COLUMN_16,
    SHARD_COLUMN_32,
    claimed_row,
    layout_16,
    layout_rows,
    primary_index_definition,
    undefined_column,
)
from tests.support.recorded_cockroach import Answer, Received, Rows, recorded_cockroach

pytestmark = pytest.mark.recorded

TASK = uuid.UUID(int=7)


class ResizedCluster:
    """Answers as a cluster whose primary key goes from 16 to 32 buckets after the first claim:
    the 16-bucket shard column is dropped (42703 for any statement naming it), the layout read
    returns the 32-bucket key from then on."""

    def __init__(self) -> None:
        self.resized = False
        self.claims: list[Received] = []

    def __call__(self, received: Received) -> Answer | None:
        if received.name == "shard_layout_get":
            if not self.resized:
                return layout_16()
            return layout_rows(("shardq_tasks_pkey", SHARD_COLUMN_32, primary_index_definition(32)))
        if received.name == "queue_list":
            return Rows(QUEUE_COLUMNS, [])
        if received.name == "task_claim_batch":
            self.claims.append(received)
            if SHARD_COLUMN_16 in received.text:
                self.resized = True
                return undefined_column(SHARD_COLUMN_16)
            return Rows(CLAIM_COLUMNS, [claimed_row(3, "q", TASK)])
        return None


def test_a_claim_on_a_dropped_shard_column_re_discovers_the_layout_and_claims_on_the_new_one():
    cluster = ResizedCluster()
    with recorded_cockroach(cluster) as server, Session(Dsn.parse(server.url())) as session:
        consumer = Consumer(TaskStore(session), ["q"], offset=0)
        assert consumer.layout().bucket_count == 16

        first = consumer.claim(10)
        assert first.tasks == [] and not first.round_empty  # not empty: the new layout is unwalked
        assert (consumer.layout().bucket_count, consumer.layout().shard_column) == (32, SHARD_COLUMN_32)

        second = consumer.claim(10)
        assert [task.key.id for task in second.tasks] == [TASK]
    assert SHARD_COLUMN_16 in cluster.claims[0].text
    assert SHARD_COLUMN_32 in cluster.claims[-1].text and SHARD_COLUMN_16 not in cluster.claims[-1].text
    assert server.names_received().count("shard_layout_get") == 2
