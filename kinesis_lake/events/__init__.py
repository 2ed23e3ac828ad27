"""Declared event schemas and the parser that turns raw Kinesis payloads into typed events.

- ``schema``: the YAML-declared ``EventSchema``, its validation and evolution rules.
- ``tables``: Iceberg and Arrow schemas of the parsed, quarantine and aggregate tables.
- ``parse``: raw records -> (parsed, quarantine), per-minute counts, dedupe.

Pure Python and pyarrow (pyiceberg only for table schemas), so it runs in Spark executors and
in tests without a cluster.
"""
