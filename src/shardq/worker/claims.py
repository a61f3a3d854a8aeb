"""Which claims a batch of outcomes closes, and how their acks are sent: a claim whose every
remaining task was acked in the batch is acked whole, by key range and token; the other acks go
per key. Nothing here touches the database."""

from __future__ import annotations

import uuid
from collections import Counter
from operator import attrgetter

from shardq.models.leases import WholeClaim
from shardq.worker.inflight import Claim, InFlight, claim_of

_workflow_of = attrgetter("claimed.workflow_id")
Whole = list[tuple[WholeClaim, list[InFlight]]]


def close_claims(outcomes: list[InFlight], acks: list[InFlight]) -> tuple[Whole, list[InFlight], set[uuid.UUID]]:
    """Count ``outcomes`` against their claims. Returns the claims they close whose every
    remaining task was acked here and none is acked per key (:attr:`Claim.keyed`; each a :class:`WholeClaim` with
    its acks, so it can be settled on its own), the other plain acks, and the tokens of the
    other claims they close (lease records to drop)."""
    per_claim = Counter(map(claim_of, outcomes))
    acked = per_claim if len(acks) == len(outcomes) else Counter(map(claim_of, acks))
    keys: dict[Claim, tuple[list, list]] = {}  # claims closed here whose remaining tasks were all acked
    closed: set[uuid.UUID] = set()
    # No lock: a claim's count is read and lowered by this thread only.
    for claim, n in per_claim.items():
        if claim.left <= 0:
            continue  # closed already: a task handed back at shutdown whose handler finished after all
        if claim.left > n:
            claim.left -= n
            continue
        if not claim.keyed and acked.get(claim, 0) >= claim.left:
            keys[claim] = ([], [])
        else:
            closed.add(claim.token)
        claim.left = 0
    if not keys:
        return [], acks, closed
    partial: list[InFlight] = []
    for o in acks:
        group = keys.get(o.claim)  # Claim hashes by identity: no per-task UUID hashing
        if group is None:
            partial.append(o)
        else:
            group[0].append(o.claimed.key)
            group[1].append(o)
    whole = [
        (WholeClaim(c.bucket, c.queue, c.first, c.last, c.token, task_keys), claim_acks)
        for c, (task_keys, claim_acks) in keys.items()
    ]
    return whole, partial, closed


def split_steps(
    whole: Whole, partial: list[InFlight], acks: list[InFlight]
) -> tuple[Whole, Whole, list[InFlight], list[InFlight]]:
    """Workflow steps apart: (whole claims without steps, whole claims with steps, the other
    partial acks, the partial acks of steps). A whole claim with steps is acked by key range too,
    with the moves of its steps' workflows in the same transaction; a step of a claim closed by
    other outcomes, or not yet, is acked per key with its workflow's moves."""
    if not any(map(_workflow_of, acks)):
        return whole, [], partial, []
    without: Whole = []
    with_steps: Whole = []
    for item in whole:
        (with_steps if any(map(_workflow_of, item[1])) else without).append(item)
    steps: list[InFlight] = []
    others: list[InFlight] = []
    for o in partial:
        (others if o.claimed.workflow_id is None else steps).append(o)
    return without, with_steps, others, steps
