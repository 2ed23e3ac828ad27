"""Names of the columns the pipeline adds around the declared event fields.

They live apart from ``tables.py`` because the schema validation must reject event fields
that would collide with them, and ``schema.py`` must not depend on the table layouts.
"""

from __future__ import annotations

# Together these identify one (possibly de-aggregated) Kinesis record.
STREAM_NAME = "stream_name"
SHARD_ID = "shard_id"
SEQUENCE_NUMBER = "sequence_number"
SUB_SEQUENCE_NUMBER = "sub_sequence_number"
IDENTITY_COLUMNS = (STREAM_NAME, SHARD_ID, SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER)
ARRIVAL_TIMESTAMP = "approximate_arrival_timestamp"

# Raw table columns the parser reads besides the identity and arrival columns.
DATA = "data"
SOURCE_ERROR = "source_error"

# Parsed table.
EVENT_TIMESTAMP = "event_timestamp"
PARSED_AT = "parsed_at"

# Quarantine table.
PAYLOAD = "payload"
ERROR = "error"
ERROR_FIELD = "error_field"
QUARANTINED_AT = "quarantined_at"
TARGET_TABLE = "target_table"  # the declared table that rejected it; null: none could take it
RESOLVED_AT = "resolved_at"  # when a replay moved it into its tables; null: still quarantined
RESOLVED_INTO = "resolved_into"  # the tables that replay wrote it to, comma-separated

# Aggregate table.
WINDOW_START = "window_start"
EVENT_TYPE = "event_type"
EVENT_COUNT = "event_count"
UPDATED_AT = "updated_at"
ALL_EVENT_TYPES = "all"

# Columns of the parsed table that are not event fields; an event field may not reuse them.
RESERVED_COLUMNS = frozenset([*IDENTITY_COLUMNS, ARRIVAL_TIMESTAMP, EVENT_TIMESTAMP, PARSED_AT])
