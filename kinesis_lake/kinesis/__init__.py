"""Kinesis Data Streams access without Spark or Dagster.

Import from the submodules: ``client`` (boto3 client), ``retry`` (backoff policy),
``streams`` (stream/shard metadata and lineage), ``records`` and ``kpl`` (user records and
KPL de-aggregation), ``shard_reader`` (replayable per-shard reads, used on Spark executors),
``producer`` (PutRecords with partial-failure handling, sample events), ``endpoint`` (local
kinesalite/moto servers) and ``fault_proxy`` (fault injection for tests).
"""
