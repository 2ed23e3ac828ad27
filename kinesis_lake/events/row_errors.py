"""How a rejected value is reported: the first error of each row, quoting the value.

A record whose value cannot be converted is routed to quarantine with one reason. The
reason must say which field was wrong and show the value as the producer sent it, without
flooding the table: :func:`excerpt` renders at most a short prefix of any value, however
big or deep, and a JSON number past the double range (:class:`HugeNumber`, from
:func:`parse_json_float`) keeps its digits to be quoted rather than ``Infinity``.

Invariant: A ROW'S REASON IS ITS FIRST ERROR. Checks run in a fixed order (source error,
decoding, then fields in declared order) and :class:`RowErrors` keeps only the first, so
the same record always gets the same reason.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa

_EXCERPT_CHARS = 60


class HugeNumber(float):
    """A JSON number beyond the double range (``1e400``): infinite as a float, but it keeps the
    digits the producer sent so messages quote them rather than ``Infinity``."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> HugeNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def parse_json_float(text: str) -> float:
    """``parse_float`` for the JSON decoder: a float, or a ``HugeNumber`` past the double range."""
    number = float(text)
    return number if math.isfinite(number) else HugeNumber(text)


class RowErrors:
    """The first error of each row, with the field it concerns.

    Checks run in a fixed order (source error, decoding, then fields in declared order), so
    keeping only the first error makes the reported reason deterministic.
    """

    __slots__ = ("fields", "messages")

    def __init__(self, size: int) -> None:
        self.messages: list[str | None] = [None] * size
        self.fields: list[str | None] = [None] * size

    def add(self, row: int, message: str, field: str | None = None) -> None:
        if self.messages[row] is None:
            # JSON strings may carry lone surrogates that Arrow cannot store as UTF-8.
            self.messages[row] = message.encode("utf-8", "backslashreplace").decode("utf-8")
            self.fields[row] = field

    def ok_mask(self) -> pa.Array:
        return pa.array([message is None for message in self.messages], pa.bool_())


def json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, (float, Decimal)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Punctuation(str):
    """Text ``_render`` emits as is (brackets, separators), told apart from string values."""


def _render(value: Any, limit: int) -> str:
    """JSON text of a decoded value, stopping soon after ``limit`` characters.

    Iterative, with its own stack: a value nested thousands deep (which the decoder accepts
    when the interpreter's stack allows) must not raise ``RecursionError`` while its message is
    written, and only the first ``limit`` characters are ever built, however big the value.
    Numbers render as the producer wrote them where it matters: Decimals exactly,
    ``HugeNumber`` with its digits.
    """
    parts: list[str] = []
    size = 0
    stack: list[Any] = [value]
    while stack and size <= limit:
        item = stack.pop()
        piece: str
        if type(item) is _Punctuation:
            piece = item
        elif isinstance(item, dict):
            stack.append(_Punctuation("}"))
            for index, (key, inner) in enumerate(reversed(item.items())):
                stack.append(inner)
                stack.append(_Punctuation(json.dumps(str(key)[:limit], ensure_ascii=False) + ": "))
                if index < len(item) - 1:
                    stack.append(_Punctuation(", "))
            piece = "{"
        elif isinstance(item, list):
            stack.append(_Punctuation("]"))
            for index, inner in enumerate(reversed(item)):
                stack.append(inner)
                if index < len(item) - 1:
                    stack.append(_Punctuation(", "))
            piece = "["
        elif isinstance(item, str):
            piece = json.dumps(item[:limit], ensure_ascii=False)
        elif isinstance(item, HugeNumber):
            piece = item.text
        elif isinstance(item, (bool, type(None), float)):
            piece = json.dumps(item)
        else:  # int, Decimal
            piece = str(item)
        parts.append(piece)
        size += len(piece)
    return "".join(parts)


def excerpt(value: Any) -> str:
    """A short JSON rendering of a value, so messages show it without flooding the table."""
    text = _render(value, _EXCERPT_CHARS)
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."
