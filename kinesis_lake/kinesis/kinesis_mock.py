"""kinesis-mock on 127.0.0.1: the local endpoint that serves SubscribeToShard.

kinesalite, the project's usual local endpoint, has no enhanced fan-out; kinesis-mock
(etspaceman/kinesis-mock, published on npm as ``kinesis-local``) has, and it runs on Node
alone. It binds every interface and has no setting for that, so a copy of its script with
the bind address rewritten to 127.0.0.1 is what runs (this project never listens beyond
loopback). What it does differently from AWS, and what that leaves untested, is in
``docs/efo.md``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import boto3
from botocore.config import Config

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.endpoint import find_node_package, free_port

KINESIS_MOCK_VERSION = "0.6.2"
INSTALL_HINT = (
    f"run `make setup` or `npm install --prefix .local/node kinesis-local@{KINESIS_MOCK_VERSION}`"
)
_ANY_INTERFACE = 'em("0.0.0.0")'
_LOOPBACK = 'em("127.0.0.1")'
# Its simulated delays (a new consumer takes 500 ms to become ACTIVE, and so on) are off
# unless a test asks for one: tests wait on states, not on time. Its three other delays
# (UPDATE_STREAM_MODE, START_ and STOP_STREAM_ENCRYPTION) stay at their 500 ms: no test
# uses those calls, and setting them in 0.6.2 undoes the DEREGISTER_STREAM_CONSUMER delay
# (a deregistered consumer is gone at once instead of DELETING; seen, not explained).
_DELAYED_ACTIONS = (
    "CREATE_STREAM",
    "DELETE_STREAM",
    "REGISTER_STREAM_CONSUMER",
    "DEREGISTER_STREAM_CONSUMER",
    "SPLIT_SHARD",
    "MERGE_SHARDS",
    "UPDATE_SHARD_COUNT",
)


def loopback_script(package: Path) -> Path:
    """Its script with the one bind address rewritten, next to the original (it reads
    ``server.json`` from its working directory, which must be the package's)."""
    target = package / "main-loopback.js"
    if target.is_file() and target.stat().st_mtime >= (package / "main.js").stat().st_mtime:
        return target
    source = (package / "main.js").read_text()
    if source.count(_ANY_INTERFACE) != 1:
        raise KinesisError(
            f"{package}/main.js is not the kinesis-local {KINESIS_MOCK_VERSION} this project "
            f"knows how to bind to 127.0.0.1 (found {source.count(_ANY_INTERFACE)} bind "
            f"addresses, expected 1); {INSTALL_HINT}"
        )
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(source.replace(_ANY_INTERFACE, _LOOPBACK))
    partial.replace(target)
    return target


class KinesisMockEndpoint:
    """A kinesis-mock server on 127.0.0.1 (plain HTTP; its TLS port too, unused). State
    lives in memory only.

    ``delays`` turns some of its simulated delays back on, for a test about the states
    AWS takes seconds to leave: ``{"DEREGISTER_STREAM_CONSUMER": "4000ms"}`` keeps a
    deregistered consumer DELETING for 4 s.
    """

    def __init__(self, delays: Mapping[str, str] | None = None) -> None:
        package = find_node_package("kinesis-local", "main.js")
        if package is None:
            raise FileNotFoundError(
                f"kinesis-local (kinesis-mock) is not installed: {INSTALL_HINT}"
            )
        delays = dict(delays or {})
        if unknown := set(delays) - set(_DELAYED_ACTIONS):
            raise ValueError(f"kinesis-mock has no delays named {sorted(unknown)}")
        self._durations = {
            f"{action}_DURATION": delays.get(action, "0ms") for action in _DELAYED_ACTIONS
        }
        self._package = package
        self._port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        log_fd, log_name = tempfile.mkstemp(prefix="kinesis-mock-", suffix=".log")
        os.close(log_fd)
        self._log_path = Path(log_name)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self, timeout_s: float = 30.0) -> KinesisMockEndpoint:
        env = dict(
            os.environ,
            KINESIS_MOCK_PLAIN_PORT=str(self._port),
            KINESIS_MOCK_TLS_PORT=str(free_port()),
            LOG_LEVEL="WARN",
            **self._durations,
        )
        with self._log_path.open("wb") as log:
            self._process = subprocess.Popen(
                ["node", str(loopback_script(self._package))],
                cwd=self._package,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        probe = boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
        ).client(
            "kinesis",
            endpoint_url=self.url,
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2),
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                probe.list_streams()
                return self
            except Exception:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise KinesisError(
                        f"kinesis-mock did not start; it printed:\n{self.output()}"
                    ) from None
                time.sleep(0.05)

    def output(self) -> str:
        return self._log_path.read_text(errors="replace") if self._log_path.exists() else ""

    def stop(self) -> None:
        # Killed outright: it keeps nothing on disk, and on SIGTERM its runtime takes
        # seconds to shut down.
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        self._log_path.unlink(missing_ok=True)
