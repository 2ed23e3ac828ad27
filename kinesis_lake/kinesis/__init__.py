"""Kinesis Data Streams access without Spark or Dagster.

Import from the submodules: ``client`` (boto3 client), ``retry`` (backoff policy),
``streams`` (stream/shard metadata and lineage), ``records`` and ``kpl`` (user records and
KPL de-aggregation), ``shard_reader`` (replayable per-shard reads, used on Spark executors,
stopping by the rule in ``read_stops``; their pages polled by ``polled_pages`` or pushed by
enhanced fan-out to ``subscribed_pages``, both opened as ``pages`` says, calling Kinesis
through ``shard_calls``), ``start_positions`` (where a read may start: the names settings
and options accept, timestamps, ``StartPosition``), ``producer`` (PutRecords with
partial-failure handling, sample events) and ``endpoint`` (the local kinesalite/moto
servers ``make demo`` and ``make dev`` start). The proxies that inject faults and move time
live with the tests (``kinesis_lake_tests/kinesis/``): they have no place on a user's
cluster.
"""
