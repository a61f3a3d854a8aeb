"""What operators read and do: tasks, dead letters, queues and buckets (:mod:`.actions`), stats
(:mod:`.stats`), live tasks page by page (:mod:`.browse`), ``shardq doctor`` (:mod:`.doctor`,
:mod:`.explain_checks`) and figures written for people (:mod:`.formatting`). Internal: the CLI and
the web dashboard call it; the public API is :mod:`shardq`.
"""
