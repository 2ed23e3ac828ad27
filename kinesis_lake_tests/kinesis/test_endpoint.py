"""LocalKinesisEndpoint: persistence, loopback-only binding, clear configuration errors."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint, resolve_endpoint_kind
from kinesis_lake_tests.kinesis.helpers import entries, put, read_shard

SHARD = "shardId-000000000000"


def test_kinesalite_keeps_data_across_stop_and_kill(new_stream, tmp_path: Path) -> None:
    endpoint = LocalKinesisEndpoint("kinesalite", data_dir=tmp_path / "kinesalite")
    with endpoint:
        url = endpoint.url
        client = kinesis_client(url)
        stream = new_stream(client)
        put(client, stream, entries(3))
    endpoint.start()
    try:
        assert endpoint.url == url  # restarts reuse the port, so clients stay valid
        put(client, stream, entries(1, "second-life"))
        endpoint.kill()  # a crash, not a clean shutdown
        endpoint.start()
        assert [r.data for r in read_shard(client, stream, SHARD)] == [
            b"r0",
            b"r1",
            b"r2",
            b"second-life0",
        ]
    finally:
        endpoint.stop()


def _listening_addresses(port: int) -> set[str]:
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            host, local_port = local.split(":")
            if state == "0A" and int(local_port, 16) == port:  # 0A = LISTEN
                addresses.add(host)
    return addresses


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_endpoints_listen_on_loopback_only(endpoint) -> None:
    port = int(endpoint.url.rsplit(":", 1)[1])
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, little-endian hex


def test_bad_kind_names_the_setting() -> None:
    with pytest.raises(ValueError, match="KINESIS_LAKE_ENDPOINT_KIND") as raised:
        resolve_endpoint_kind("kinesis")
    assert "kinesalite" in str(raised.value) and "moto" in str(raised.value)


def test_missing_kinesalite_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"npm install --prefix \.local/node kinesalite@3\.3\.3"
    ):
        resolve_endpoint_kind("kinesalite", node_modules=tmp_path)
    assert resolve_endpoint_kind("auto", node_modules=tmp_path) == "moto"


def test_moto_cannot_persist(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data_dir needs kinesalite"):
        LocalKinesisEndpoint("moto", data_dir=tmp_path)


def test_start_failure_shows_the_server_output(kinesalite) -> None:
    port = int(kinesalite.url.rsplit(":", 1)[1])
    with pytest.raises(KinesisError, match="EADDRINUSE"):
        LocalKinesisEndpoint("kinesalite", port=port).start(timeout_s=10)


def test_an_endpoint_that_died_on_its_own_is_revived_on_its_url_with_its_last_words() -> None:
    """What lets the suite's shared endpoint outlive a crash, and say what killed it."""
    with LocalKinesisEndpoint("kinesalite") as endpoint:
        url = endpoint.url
        assert endpoint.revive() is None  # running: nothing to do
        os.kill(endpoint.pid, signal.SIGKILL)  # not through the endpoint: a crash
        deadline = time.monotonic() + 10
        while (last_words := endpoint.revive()) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the signal takes a moment
        assert last_words is not None and "kinesalite listening on" in last_words
        assert "-9" in last_words  # its exit status
        assert endpoint.url == url
        kinesis_client(url).list_streams()  # answering again


@pytest.mark.parametrize("kind", ["kinesalite", "moto"])
def test_a_client_that_hangs_up_halfway_through_a_request_leaves_the_endpoint_serving(
    kind: str,
) -> None:
    """A producer or Spark worker killed while sending (a PutRecords body spans many
    packets) leaves a request half sent. Real Kinesis drops it; kinesalite 3.3.3 rethrew
    the request's error and died, taking every other client's stream with it."""
    with LocalKinesisEndpoint(kind) as endpoint:
        port = int(endpoint.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as half_sent:
            half_sent.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-amz-json-1.1\r\n"
                b"X-Amz-Target: Kinesis_20131202.ListStreams\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
            time.sleep(0.2)  # the server has read the headers and waits for the body
        time.sleep(0.5)  # and has seen the connection close
        assert endpoint.revive() is None, "the endpoint died"
        kinesis_client(endpoint.url).list_streams()
