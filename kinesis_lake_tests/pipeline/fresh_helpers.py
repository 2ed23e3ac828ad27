"""Comparing a fresh read with the table its next commits make: rows without the stamps
only a commit gives (null in rows still in the stream), in an order that does not depend
on the read."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kinesis_lake.events import columns as C

STAMPS = {"ingested_at", "batch_id", C.PARSED_AT}


def comparable(rows: Iterable[dict[str, Any]]) -> list[tuple]:
    """Each row as its sorted (column, repr) pairs without :data:`STAMPS`, sorted."""
    return sorted(
        tuple(sorted((k, repr(v)) for k, v in row.items() if k not in STAMPS)) for row in rows
    )
