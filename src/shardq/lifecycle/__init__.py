"""A task's life: enqueued (:mod:`.enqueue`), claimed bucket by bucket (:mod:`.claim`), retried or
dead-lettered (:mod:`.failures`), held back by exclusive keys (:mod:`.exclusive`) and flow limits
(:mod:`.flow`), woken over LISTEN/NOTIFY (:mod:`.notify`), read back (:mod:`.history`) and waited on
(:mod:`.waiting`). Internal: the public API is :mod:`shardq`.
"""
