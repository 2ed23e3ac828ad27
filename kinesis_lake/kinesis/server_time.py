"""The endpoint's clock, as Kinesis responses tell it.

Retention is the server's business: whether a record has aged out is judged by the
endpoint's time (the Date header of its responses), never by an executor's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any


def epoch_ms(timestamp: datetime) -> int:
    return int(timestamp.timestamp() * 1000)


def server_ms(response: Mapping[str, Any]) -> int | None:
    """The endpoint's clock from the response's Date header (second precision, rounded
    down); None when the response has none."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return None
    try:
        return epoch_ms(parsedate_to_datetime(date))
    except (TypeError, ValueError):
        return None
