"""Row filters that keep pyiceberg's file pruning.

pyiceberg evaluates an ``In`` against file statistics only up to 200 values
(``IN_PREDICATE_LIMIT``); above that every file "might match" and is read. An ``Or`` of
``In`` filters of at most that many values each is pruned like each of them. The ``Or``
is balanced: pyiceberg's visitors recurse into it, and a left-deep chain of a few hundred
chunks passes Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.expressions import AlwaysFalse, BooleanExpression, In, Or
from pyiceberg.expressions.visitors import IN_PREDICATE_LIMIT


def any_of(column: str, values: Sequence[object]) -> BooleanExpression:
    """Rows whose ``column`` is one of ``values``, for any number of values."""
    chunks = [
        In(column, list(values[start : start + IN_PREDICATE_LIMIT]))
        for start in range(0, len(values), IN_PREDICATE_LIMIT)
    ]
    if len(chunks) < 2:
        return chunks[0] if chunks else AlwaysFalse()
    return Or(*chunks)  # with more than two operands pyiceberg builds a balanced tree
