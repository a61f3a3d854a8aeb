"""Workflows: tasks that their parents' acks release (:mod:`.steps`), and a Spark run's
``then=`` task, a one-step workflow (:mod:`.spark_callbacks`). Internal: the public API is
:mod:`shardq` (``App.workflow``, ``Client.workflow_*``).
"""
