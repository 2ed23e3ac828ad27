"""The lake's Iceberg library: catalog, tables, the exactly-once commit protocol, upkeep.

Plain pyiceberg underneath; no Dagster, no Spark, no Kinesis, so every piece can run in
a test, a CLI, a Dagster asset or a Spark executor alike.

* ``catalog``: which catalog (pyiceberg configuration, else embedded SQLite).
* ``raw_table``, ``tables``: table definitions; create or evolve in place.
* ``data_files``: Parquet files written on executors from plain table facts.
* ``commit``, ``retry``, ``summary``: one atomic, idempotent commit per batch and writer.
* ``incremental``: what was appended since a snapshot, for derived tables.
* ``query``: SQL, history and printable results for people and checks.
* ``maintenance``: snapshot expiry, compaction, orphan-file removal.
"""
