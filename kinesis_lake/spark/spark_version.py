"""The oldest Spark the lake's data sources run on, checked before anything starts.

The ``kinesis`` source bounds each micro-batch through ``latestOffset(start, limit)`` and
``getDefaultReadLimit``, which PySpark's Python streaming sources have only since 4.2.0.
On 4.0 or 4.1 the query would start and then fail at its first trigger with a TypeError
about missing arguments; managed runtimes still ship those (docs/operations.md, "Which
managed Spark qualifies"), so the versions are compared up front instead.
"""

from __future__ import annotations

import re

from kinesis_lake.errors import ConfigurationError

MINIMUM_SPARK = (4, 2)


class SparkVersionError(ConfigurationError):
    """The Spark (or pyspark) in use is older than the data sources need."""


def require_spark(version: str) -> None:
    """Refuse ``version`` (``spark.version`` or ``pyspark.__version__``) below 4.2."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < MINIMUM_SPARK:
        raise SparkVersionError(
            f"Spark {version} is too old for kinesis-lake: it needs Spark 4.2 or later (read "
            "limits of Python streaming sources); Databricks Runtime 19+ or your own Spark "
            "4.2+ qualify, see docs/operations.md 'Which managed Spark qualifies'."
        )
