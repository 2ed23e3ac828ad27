"""The ``kinesis`` Spark data source: a streaming reader of Kinesis Data Streams.

* ``source``: the data source and its stream reader (planning on the driver, reading on
  executors).
* ``arrow``: the rows Spark receives, one per user record, and their schema.
* ``options``: the source's options, parsed and checked before any read.
* ``offsets``: a micro-batch's read plan (which shards, from where, how much) as Spark's
  offset log keeps it.
* ``planning``: the next plan from the last one and what executors recorded (resharding
  order, start positions, data loss, availableNow's end, idle back-off).
* ``read_limits``: an epoch's record and byte limits shared among its shards.
* ``progress``: the per-shard progress records executors write and the driver reads.
* ``available_now``: a bounded run (what arrived before it started, then stop) on every
  supported Spark, 4.0/4.1 included.

The shard reading itself is the Kinesis library's (:mod:`kinesis_lake.kinesis`). This
file imports only the version check: Spark imports the package in every process it starts
for a query, and a Spark 3.x must be refused before a module here imports what it lacks.
"""

from kinesis_lake.spark.spark_version import require_pyspark

require_pyspark()
