"""Routes: which declared tables a decoded JSON record belongs to.

A route is a conjunction of conditions on JSON fields, each addressed by a dotted path into
nested objects (``context.device.os``). A record goes to every table whose route it
satisfies (a catch-all table next to per-type tables is a normal declaration); a record that
satisfies none is quarantined with the reason ``no route``, so every raw row is accounted for.

Conditions compare decoded JSON values, never text: ``{"n": 1}`` equals ``1`` but not
``"1"``, and ``prefix`` / ``matches`` only match strings. Routing runs on the executors
inside the parser, so routes travel as plain dicts (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_lake.events.schema import EventSchemaError

OPERATORS = ("equals", "one_of", "exists", "prefix", "matches")
NO_ROUTE = "no route: the record matches no declared table's route"

_MISSING = object()
_SCALARS = (str, int, float, bool)


class RouteError(EventSchemaError):
    """A route that cannot be evaluated as written; the message names the condition."""


def _lookup(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for part in path:
        if type(value) is not dict:
            return _MISSING
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def _same_json_value(left: Any, right: Any) -> bool:
    """JSON equality: booleans are not numbers (Python says ``True == 1``)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


@dataclass(frozen=True)
class Condition:
    """One test on the value at ``path``; see OPERATORS and the README's routing table."""

    path: tuple[str, ...]
    operator: str
    value: Any

    def __post_init__(self) -> None:
        where = f"route condition on {'.'.join(self.path)!r}"
        if not self.path or not all(isinstance(p, str) and p for p in self.path):
            raise RouteError(f"{where}: the path must be field names joined by dots")
        if self.operator not in OPERATORS:
            raise RouteError(
                f"{where}: unknown operator {self.operator!r}; use one of {', '.join(OPERATORS)}"
            )
        checks = {
            "equals": isinstance(self.value, _SCALARS) or self.value is None,
            "one_of": isinstance(self.value, list | tuple)
            and all(isinstance(v, _SCALARS) or v is None for v in self.value),
            "exists": isinstance(self.value, bool),
            "prefix": isinstance(self.value, str),
            "matches": isinstance(self.value, str),
        }
        if not checks[self.operator]:
            wanted = {
                "equals": "a string, number, boolean or null",
                "one_of": "a list of strings, numbers, booleans or nulls",
                "exists": "true or false",
                "prefix": "a string",
                "matches": "a regular expression string",
            }[self.operator]
            raise RouteError(f"{where}: {self.operator} takes {wanted}, got {self.value!r}")
        if self.operator == "one_of":
            object.__setattr__(self, "value", tuple(self.value))
        if self.operator == "matches":
            try:
                re.compile(self.value)
            except re.error as exc:
                raise RouteError(f"{where}: invalid regular expression: {exc}") from None

    def describe(self) -> str:
        """The condition in words, for asset descriptions."""
        path = ".".join(self.path)
        shown = json.dumps(self.value)
        return {
            "equals": f"{path} = {shown}",
            "one_of": f"{path} in {shown}",
            "exists": f"{path} {'exists' if self.value else 'is absent'}",
            "prefix": f"{path} starts with {shown}",
            "matches": f"{path} matches /{self.value}/",
        }[self.operator]

    def holds(self, record: Mapping[str, Any]) -> bool:
        value = _lookup(record, self.path)
        if self.operator == "exists":
            return (value is not _MISSING and value is not None) == self.value
        if value is _MISSING:
            return False
        if self.operator == "equals":
            return _same_json_value(value, self.value)
        if self.operator == "one_of":
            return any(_same_json_value(value, option) for option in self.value)
        if not isinstance(value, str):
            return False
        if self.operator == "prefix":
            return value.startswith(self.value)
        return _compiled(self.value).search(value) is not None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


@dataclass(frozen=True)
class Route:
    """All conditions must hold; no condition at all takes every decoded record."""

    conditions: tuple[Condition, ...] = ()

    def takes(self, record: Mapping[str, Any]) -> bool:
        return all(condition.holds(record) for condition in self.conditions)

    def to_dict(self) -> dict[str, Any]:
        return {
            ".".join(c.path): {c.operator: list(c.value) if c.operator == "one_of" else c.value}
            for c in self.conditions
        }

    @classmethod
    def from_dict(cls, data: object) -> Route:
        """``{path: value}`` is equality; ``{path: {operator: value}}`` any operator."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise RouteError(
                f"route must be a mapping of field paths to conditions, got {type(data).__name__}"
            )
        conditions = []
        for path, test in data.items():
            if not isinstance(path, str):
                raise RouteError(f"route: field path {path!r} must be a string")
            parts = tuple(path.split("."))
            if isinstance(test, Mapping):
                if len(test) != 1:
                    raise RouteError(
                        f"route condition on {path!r}: give exactly one operator "
                        f"({', '.join(OPERATORS)}), got {', '.join(map(str, test)) or 'none'}"
                    )
                ((operator, value),) = test.items()
                conditions.append(Condition(parts, str(operator), value))
            else:
                conditions.append(Condition(parts, "equals", test))
        return cls(tuple(conditions))
