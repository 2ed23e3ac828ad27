"""The Spark reader's fresh option, the parts that need no JVM: its limits from the
options, and the registration refusing a Spark that would keep the plain reader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError
from kinesis_lake.pipeline.fresh_read import TailLimits
from kinesis_lake.pipeline.fresh_spark import fresh_limits, register_fresh_reads


def test_unset_limits_are_the_python_reads_and_set_ones_are_taken() -> None:
    assert fresh_limits({}) == TailLimits()
    assert fresh_limits({"freshmaxrecords": "5", "freshmaxage": "2.5"}) == TailLimits(5, 2.5)
    assert fresh_limits({"freshmaxbytes": "2048"}) == TailLimits(max_bytes=2048)


def test_a_bad_limit_fails_naming_the_options() -> None:
    with pytest.raises(
        ConfigurationError, match=r"'freshMaxRecords'.*'freshMaxBytes'.*'freshMaxAge'"
    ):
        fresh_limits({"freshmaxrecords": "many"})
    with pytest.raises(ConfigurationError, match=r"max_bytes must be at least 1"):
        fresh_limits({"freshmaxbytes": "0"})


def test_spark_4_0_is_refused_before_it_keeps_the_plain_reader(
    streamless_settings: Settings,
) -> None:
    """Spark 4.0 keeps the first registration of a name (the plain tables' reader), so a
    fresh registration would be silently ignored and the option refused as unregistered."""
    session = SimpleNamespace(version="4.0.5")  # register_fresh_reads reads only .version
    with pytest.raises(ConfigurationError, match=r"Spark 4\.1.*fresh_read.*query --fresh"):
        register_fresh_reads(session, streamless_settings)  # type: ignore[arg-type]
