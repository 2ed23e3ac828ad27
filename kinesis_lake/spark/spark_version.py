"""The Spark releases the lake's data sources run on: 4.0 and later, Spark 3.x refused.

Python streaming data sources arrived in Spark 4.0. On Spark 3.x ``pyspark.sql.datasource``
does not exist, so importing the data sources would fail with an ImportError that says
nothing of the cause; the data source packages call :func:`require_pyspark` first
(``spark/kinesis/__init__.py``, ``spark/iceberg/__init__.py``), and the session builder
checks the JVM's ``spark.version`` (a Spark Connect server's included). Each refuses in one
line that names what qualifies. This module imports no PySpark of its own for that reason.

Between 4.0 and 4.3 the data source API differs (docs/spark-4.0-4.1.md). The classes the
source and sink build on come from :mod:`kinesis_lake.spark.datasource_api`; what the
driver does differently is here:

* :func:`has_read_limits` says how a bounded run drains. It asks ``spark.version``: over
  Spark Connect, or with a pip pyspark newer than the cluster's, the client's PySpark says
  nothing about the Spark that runs the query.
* :func:`register_data_source`: 4.0 refuses to register again a data source that the
  ``pyspark_*`` hook registered.
* :func:`progress_offset`: 4.0/4.1 report a source's ``endOffset`` in query progress as a
  Python dict's repr, not JSON.
"""

from __future__ import annotations

import ast
import json
import re
from typing import TYPE_CHECKING

from kinesis_lake.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MINIMUM_SPARK = (4, 0)
READ_LIMITS_SINCE = (4, 2)
REPLACES_SOURCES_SINCE = (4, 1)


class SparkVersionError(ConfigurationError):
    """The Spark (or pyspark) in use is older than the data sources need."""


def _minor(version: str) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", version)
    return None if found is None else (int(found[1]), int(found[2]))


def require_spark(version: str) -> None:
    """Refuse ``version`` (``spark.version`` or ``pyspark.__version__``) below 4.0."""
    minor = _minor(version)
    if minor is None or minor < MINIMUM_SPARK:
        raise SparkVersionError(
            f"Spark {version} is too old for kinesis-lake: it needs Spark 4.0 or later "
            "(Python streaming data sources); EMR 8+, Glue 6+, Databricks Runtime 17.3+ and "
            "your own Spark 4 qualify, see docs/operations.md 'Which managed Spark qualifies'."
        )


def require_pyspark() -> None:
    """Refuse the PySpark this process imports when it is older than 4.0."""
    import pyspark

    require_spark(pyspark.__version__)


def has_read_limits(version: str) -> bool:
    """Whether Spark ``version`` gives Python streaming sources read limits, and with them
    ``Trigger.AvailableNow`` (4.2+); 4.0/4.1 run one batch under AvailableNow, then stop."""
    minor = _minor(version)
    return minor is not None and minor >= READ_LIMITS_SINCE


def replaces_data_sources(version: str) -> bool:
    """Whether registering a data source under a name already registered replaces it
    (4.1+); 4.0 keeps the first one (see :func:`register_data_source`)."""
    minor = _minor(version)
    return minor is not None and minor >= REPLACES_SOURCES_SINCE


def register_data_source(spark: SparkSession, source: type) -> None:
    """``spark.dataSource.register(source)``. On 4.0 a name the ``pyspark_*`` hook already
    registered (with this same class) raises DATA_SOURCE_ALREADY_EXISTS; 4.1+ replace it."""
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(source)
    except AnalysisException as error:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(error):
            raise


def progress_offset(end_offset: str | dict) -> dict:
    """A source's ``endOffset`` from ``StreamingQuery.recentProgress``: JSON since 4.2, the
    repr of a Python dict on 4.0/4.1 (``listener.py``: ``str(j["endOffset"])``)."""
    if isinstance(end_offset, dict):
        return end_offset
    try:
        return json.loads(end_offset)
    except json.JSONDecodeError:
        return ast.literal_eval(end_offset)
