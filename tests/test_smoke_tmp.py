from shardq import resize
def test_smoke(pg_db):
    c = pg_db.client
    c.enqueue_many("q", [b"x"] * 500)
    r = resize.resize_buckets(c.new_session, 16, on_progress=print)
    print(r)
    print(pg_db.sql("select column_default from information_schema.columns where table_name='shardq_tasks' and column_name='bucket'"))
    c.enqueue_many("q", [b"x"] * 500)
    print(pg_db.sql("select bucket, count(*) from shardq_tasks group by 1 order by 1"))
    r = resize.resize_buckets(c.new_session, 3, on_progress=print, batch=50)
    print(r)
    print(pg_db.sql("select bucket, count(*) from shardq_tasks group by 1 order by 1"))
    print(pg_db.sql("select * from shardq_buckets"))
    print(resize.resize_buckets(c.new_session, 3))
