"""The Dagster names of each stream the lake ingests.

A lake ingests the one stream its settings name (``KINESIS_STREAM_NAME`` into
``raw_events``: the names the UI, the README and the CLI have always used) or the streams
its declaration file lists, each with its own raw table, ingestion asset and job, backlog
sensor and checks; ``StreamKeys`` derives all those names from the stream and its table.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource
from kinesis_lake.events.declaration import RAW_TABLE, LakeDeclaration

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
