"""A run that lingers: after draining the backlog it keeps its streaming query going while
records keep arriving, so a steady stream is not split into one new run (and one query
start) per backlog. Real Spark, kinesalite, a real catalog."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace

from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, raw_rows, stream_truth


def test_a_lingering_run_takes_records_put_while_it_runs_and_ends_once_they_stop(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint, run_linger_seconds=5)
    produce(settings, 40, seed=21)
    prepare_raw_table(settings)  # so the watching thread can count its rows from the start
    late = threading.Event()

    def put_after_the_first_commit() -> None:
        deadline = time.monotonic() + 120
        while raw_rows(settings) < 40 and time.monotonic() < deadline:
            time.sleep(0.3)
        produce(settings, 60, seed=22)
        late.set()

    producer = threading.Thread(target=put_after_the_first_commit, daemon=True)
    producer.start()

    result = run_ingestion(spark, settings)

    producer.join(5)
    assert late.is_set()
    # The 60 put after the backlog had committed were taken by this same run.
    assert result.rows == 100
    assert result.batches >= 2
    keys = raw_keys(settings)
    assert not [key for key, n in Counter(keys).items() if n > 1]
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)


def test_a_lingering_run_ends_at_its_cap_under_steady_traffic_and_loses_nothing(
    spark, kinesalite_endpoint, settings_factory
):
    """A stream that never pauses must still end the run (so its checks run and the
    sensor's in-progress verdict stays honest): KINESIS_LAKE_RUN_MAX_SECONDS caps it, and
    whatever arrives after it is the next run's."""
    settings = settings_factory(kinesalite_endpoint, run_linger_seconds=60, run_max_seconds=8)
    produce(settings, 20, seed=23)
    done = threading.Event()
    put = [20]

    def steady() -> None:
        seed = 100
        deadline = time.monotonic() + 180
        while not done.is_set() and time.monotonic() < deadline:
            produce(settings, 5, seed=seed)
            put[0] += 5
            seed += 1
            time.sleep(0.5)

    producer = threading.Thread(target=steady, daemon=True)
    producer.start()
    result = run_ingestion(spark, settings)
    still_producing = producer.is_alive()
    done.set()
    producer.join(10)

    assert still_producing, "the run outlived the producer: its cap did not end it"
    assert result.rows > 0
    drained = run_ingestion(spark, replace(settings, run_linger_seconds=0))
    assert result.rows + drained.rows == put[0]
    keys = raw_keys(settings)
    assert len(keys) == put[0] == len(set(keys))
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)


def test_a_batch_report_that_fails_does_not_stop_ingestion(
    spark, kinesalite_endpoint, settings_factory
):
    """Reporting a committed batch (a catalog read, then Dagster's event log: Postgres in
    production) can fail transiently. The batch is already durable: the query must go on
    and take what arrives next, not end the run, or a stream with a flaky event store
    would stop. Here the report of the first batch raises, as a lost connection would."""
    settings = settings_factory(kinesalite_endpoint, run_linger_seconds=5)
    produce(settings, 40, seed=31)
    prepare_raw_table(settings)
    reports: list[int] = []

    def flaky_event_log(report) -> None:
        reports.append(report.rows)
        if len(reports) == 1:
            raise ConnectionError("event log unreachable")

    def put_after_the_first_commit() -> None:
        deadline = time.monotonic() + 120
        while raw_rows(settings) < 40 and time.monotonic() < deadline:
            time.sleep(0.3)
        produce(settings, 60, seed=32)

    producer = threading.Thread(target=put_after_the_first_commit, daemon=True)
    producer.start()

    result = run_ingestion(spark, settings, on_batch=flaky_event_log)

    producer.join(5)
    assert result.rows == 100
    assert sum(reports) == 100  # every batch was offered for reporting, the failed one too
    keys = raw_keys(settings)
    assert not [key for key, n in Counter(keys).items() if n > 1]
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)
