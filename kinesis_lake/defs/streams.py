"""Each stream the lake ingests, as Dagster knows it: its names, its asset, its freshness.

A lake ingests the one stream its settings name (``KINESIS_STREAM_NAME`` into
``raw_events``: the names the UI, the README and the CLI have always used) or the streams
its declaration file lists, each with its own raw table, ingestion asset and job, backlog
sensor and checks; ``StreamKeys`` derives all those names from the stream and its table.

The stream itself is an external asset: Dagster never writes it, the backlog sensor
records its state and each ingestion run observes it. Its freshness (how far the raw table
is behind what the stream holds) is measured and judged here once, because the raw
table's freshness check and the backlog sensor must agree on it.
"""

import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import dagster as dg
from botocore.exceptions import BotoCoreError, ClientError

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource
from kinesis_lake.errors import KinesisLakeError
from kinesis_lake.events.declaration import RAW_TABLE, LakeDeclaration
from kinesis_lake.kinesis.freshness import StreamFreshness, shards_label
from kinesis_lake.pipeline.backlog import lake_freshness
from kinesis_lake.pipeline.lake import raw_positions

OWNERS = ["team:data-platform"]
"""Who answers for every asset of the lake (defined here, with the first of them)."""
INGESTION_GROUP = "ingestion"
"""The stream and its raw table, side by side in the UI."""
INGESTION_POOL = "kinesis_lake_ingestion"


@dataclass(frozen=True)
class StreamKeys:
    stream: str | None
    """The declared stream's name; None: the one stream the settings name."""
    raw_table: str = RAW_TABLE

    @property
    def declared(self) -> bool:
        return self.stream is not None

    @property
    def stream_asset(self) -> dg.AssetKey:
        if not self.declared:
            return dg.AssetKey("kinesis_stream")
        return dg.AssetKey(f"kinesis_{self.raw_table.removeprefix('raw_')}")

    @property
    def raw_asset(self) -> dg.AssetKey:
        return dg.AssetKey(self.raw_table)

    @property
    def sensor_name(self) -> str:
        return (
            "kinesis_backlog_sensor" if not self.declared else f"kinesis_backlog_{self.raw_table}"
        )

    @property
    def ingestion_pool(self) -> str:
        """One pool per stream: each has its own checkpoint, which admits one query, and
        a run of one stream (lingering for minutes) must not hold back another's."""
        return INGESTION_POOL if not self.declared else f"{INGESTION_POOL}_{self.raw_table}"

    @property
    def ingest_job_name(self) -> str:
        return f"ingest_{self.raw_table}"

    def settings(self, lake: Settings) -> Settings:
        """``lake`` for this stream (the settings as they are for the undeclared one)."""
        if self.stream is None:
            return lake
        return lake.for_stream(self.stream, self.raw_table)

    def lake(
        self, settings: PipelineSettingsResource, kinesis: KinesisResource | None = None
    ) -> Settings:
        """This stream's settings in a run or tick; for the undeclared stream, ``kinesis``
        (which names a stream of its own) must name the same one."""
        lake = self.settings(settings.settings())
        if kinesis is not None and not self.declared:
            kinesis.require_same_stream(lake)
        return lake


DEFAULT_STREAM = StreamKeys(None)


def stream_keys(settings: Settings, declaration: LakeDeclaration) -> list[StreamKeys]:
    """One per stream of the lake, in declared order."""
    if not declaration.streams:
        return [StreamKeys(None, settings.raw_table_name)]
    return [StreamKeys(stream.name, stream.raw_table) for stream in declaration.streams]


STREAM_OBSERVATION_INTERVAL = timedelta(minutes=5)
"""The backlog sensor records the stream's state at least this often (more often when it
changes); the stream's freshness policy fails when those records stop."""


def stream_spec(keys: StreamKeys) -> dg.AssetSpec:
    """A Kinesis stream of the lake: Dagster never writes it, it records its state."""
    return dg.AssetSpec(
        keys.stream_asset,
        description=(
            f"The Kinesis data stream {keys.stream or '(KINESIS_STREAM_NAME)'} ingested into "
            f"{keys.raw_table}. Dagster does not write it: the backlog sensor records its "
            "shards, retention and oldest unconsumed record as materializations (so a stopped "
            "sensor shows up as a stale stream), and each ingestion run observes it as it "
            "starts."
        ),
        group_name=INGESTION_GROUP,
        kinds={"kinesis"},
        owners=OWNERS,
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=STREAM_OBSERVATION_INTERVAL * 3,
            warn_window=STREAM_OBSERVATION_INTERVAL * 2,
        ),
    )


def measure_freshness(settings: Settings, kinesis: KinesisResource) -> StreamFreshness:
    """Freshness of ``settings``' stream (the resource provides the client, not the name:
    a lake of several streams measures each with one client)."""
    return lake_freshness(kinesis.get_client(), settings, raw_positions(settings).positions)


def stream_metadata(fresh: StreamFreshness, positions_snapshot_id: int | None) -> dict[str, Any]:
    """The stream's state as the sensor and the ingestion run record it (numeric: plotted)."""
    probe = fresh.probe
    metadata: dict[str, Any] = {
        "shards": probe.shards,
        "shards_with_backlog": len(probe.shards_with_backlog),
        "retention_hours": probe.retention_hours,
        "oldest_unconsumed_age_seconds": round(fresh.oldest_unconsumed_age_seconds or 0.0, 3),
        "retention_used": round(fresh.retention_used, 4),
        "committed_positions": dg.MetadataValue.json(fresh.positions),
        "first_unconsumed": dg.MetadataValue.json(dict(probe.first_unconsumed)),
    }
    if positions_snapshot_id is not None:
        metadata["raw_snapshot_id"] = positions_snapshot_id
    return metadata


def freshness_outcome(fresh: StreamFreshness) -> tuple[bool, dict, str]:
    """(passed, metadata, description) of the freshness check; the sensor reuses it."""
    age = fresh.oldest_unconsumed_age_seconds
    metadata = {
        "shards": fresh.probe.shards,
        "shards_with_backlog": len(fresh.probe.shards_with_backlog),
        "oldest_unconsumed_age_seconds": round(age or 0.0, 3),
        "max_lag_seconds": fresh.max_lag_seconds,
        "retention_hours": fresh.probe.retention_hours,
        "retention_used": round(fresh.retention_used, 4),
    }
    if age is None:
        description = "Nothing in the stream is waiting past the committed positions."
    elif fresh.passed:
        description = (
            f"Oldest unconsumed record is {age:.0f} s old, within {fresh.max_lag_seconds:.0f} s "
            f"(shards with backlog: {shards_label(fresh.probe.shards_with_backlog)})."
        )
    else:
        description = (
            f"Stale: the stream holds records {age:.0f} s old that are not in the raw table "
            f"(allowed {fresh.max_lag_seconds:.0f} s; shards "
            f"{shards_label(fresh.probe.shards_with_backlog)}). Ingestion is not "
            "keeping up or not running: check the backlog sensor and recent raw_events runs."
        )
    return fresh.passed, metadata, description


def stream_asset(keys: StreamKeys) -> dg.AssetsDefinition:
    """The stream as an observable asset in its ingestion job: the run observes where the
    stream stands before it drains it, and because the job targets the stream, the UI
    lists the backlog sensor that launches it among the stream's automations."""

    with warnings.catch_warnings():
        # Beta in Dagster 1.13 (the documented way to run an observation in a job); the
        # warning would repeat in every code-server log without telling an operator anything.
        warnings.simplefilter("ignore", dg.BetaWarning)
        decorator = dg.multi_observable_source_asset(
            specs=[stream_spec(keys)], name=f"observe_{keys.raw_table}"
        )

    @decorator
    def observe(
        context: dg.AssetExecutionContext,
        settings: PipelineSettingsResource,
        kinesis: KinesisResource,
    ) -> dg.ObserveResult:
        lake = keys.lake(settings, kinesis)
        try:
            fresh = measure_freshness(lake, kinesis)
        except (KinesisLakeError, BotoCoreError, ClientError) as error:
            # The ingestion after it depends on this step: a failed look at the stream
            # must not skip the run that drains it (which fails on its own if Kinesis is
            # really down). Recorded, so the UI shows why this observation is empty.
            reason = " ".join(f"{type(error).__name__}: {error}".split())
            context.log.warning(f"Could not observe {lake.stream_name}: {reason}")
            return dg.ObserveResult(
                asset_key=keys.stream_asset, metadata={"observation_error": reason}
            )
        return dg.ObserveResult(
            asset_key=keys.stream_asset,
            metadata=stream_metadata(fresh, raw_positions(lake).snapshot_id),
        )

    return observe


KINESIS_STREAM = DEFAULT_STREAM.stream_asset
kinesis_stream = stream_asset(DEFAULT_STREAM)
