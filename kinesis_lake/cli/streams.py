"""The lake's Kinesis streams: ``produce`` (send the demo's generated events) and
``create-streams`` (create the declared streams that do not exist yet)."""

from __future__ import annotations

import argparse
import time

from kinesis_lake.cli.common import Commands, add_command, chosen_streams, current_settings


def cmd_produce(args: argparse.Namespace) -> None:
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.producer import put_records
    from kinesis_lake.kinesis.streams import ensure_stream
    from kinesis_lake.pipeline.encoded_events import (
        RegistryTarget,
        demo_payloads,
        stream_format,
    )

    (settings,) = chosen_streams(current_settings(), args.stream, one=True)
    fmt = stream_format(settings)
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    events = demo_payloads(
        fmt,
        settings.stream_name,
        args.count,
        malformed_every=args.malformed_every,
        unrouted_every=args.unrouted_every,
        seed=int(time.time()) if args.seed is None else args.seed,
        zlib_compressed=args.zlib,
        target=RegistryTarget(args.registry_name, args.schema_name),
    )
    summary = put_records(client, settings.stream_name, events, rate_per_s=args.rate)
    print(
        f"sent {summary.sent} {fmt.kind} records to {settings.stream_name} in {summary.calls} "
        f"PutRecords calls ({summary.retried_entries} entries retried, {summary.failed} failed)"
    )


def add_produce(commands: Commands) -> None:
    produce = add_command(
        commands,
        "produce",
        "send the demo's generated events, in the stream's declared format: JSON, Avro, or "
        "Avro behind the Glue Schema Registry's header (its schema version found or "
        "registered in the stream's registry first)",
        cmd_produce,
    )
    produce.add_argument("--count", type=int, required=True, help="how many records to send")
    produce.add_argument(
        "--stream", default=None, help="the declared stream to send to (when there are several)"
    )
    produce.add_argument(
        "--rate", type=float, default=None, help="records per second; default: as fast as it can"
    )
    produce.add_argument(
        "--malformed-every",
        type=int,
        default=0,
        help="make every Nth record malformed (0: none), to see quarantine at work",
    )
    produce.add_argument(
        "--unrouted-every",
        type=int,
        default=0,
        help="make every Nth record a heartbeat no route takes (0: none)",
    )
    produce.add_argument(
        "--seed", type=int, default=None, help="same seed, same records; default: the time"
    )
    produce.add_argument(
        "--zlib",
        action="store_true",
        help="glue-schema-registry streams: compress each payload (compression byte 5)",
    )
    produce.add_argument(
        "--registry-name",
        default=None,
        help="glue-schema-registry streams: the registry to find or register the schema in; "
        "default: default-registry, as the AWS serializers",
    )
    produce.add_argument(
        "--schema-name",
        default=None,
        help="glue-schema-registry streams: the schema's name; default: the stream's name",
    )


def cmd_create_streams(args: argparse.Namespace) -> None:
    """Create the lake's streams that do not exist yet: what ``ingest`` needs before a
    producer of the user's own has sent anything (``produce`` sends the demo's events)."""
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.streams import StreamNotFoundError, describe_stream, ensure_stream

    for stream in chosen_streams(current_settings(), args.stream):
        client = kinesis_client(stream.endpoint_url, stream.region, role=stream.assumed_role)
        try:
            info = describe_stream(client, stream.stream_name)
        except StreamNotFoundError:
            info = ensure_stream(client, stream.stream_name, stream.shard_count)
            print(f"{stream.stream_name}: created with {info.open_shard_count} shards")
        else:  # resharding a live stream is the operator's decision, never a side effect
            print(f"{stream.stream_name}: exists ({info.open_shard_count} shards), left as it is")


def add_create_streams(commands: Commands) -> None:
    create_streams = add_command(
        commands,
        "create-streams",
        "create the lake's streams that do not exist yet (the declaration's streams:, else "
        "KINESIS_STREAM_NAME), with KINESIS_SHARD_COUNT shards; existing ones are left as "
        "they are",
        cmd_create_streams,
    )
    create_streams.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )
