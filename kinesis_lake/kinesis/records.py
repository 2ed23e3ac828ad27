"""The record type every consumer in this project sees."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KinesisRecord:
    """One user record, addressed by (sequence_number, sub_sequence_number).

    A KPL-aggregated Kinesis record carries many user records under one sequence number;
    the sub-sequence number tells them apart, so the pair is the unique, ordered key that
    deduplication and replay must use. ``error`` is set when an aggregate was corrupt and
    is passed on whole (``aggregated=False``) instead of being dropped, so that the data
    reaches a dead-letter path and the loss is visible.
    """

    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    arrival_ms: int
    data: bytes
    aggregated: bool
    error: str | None
