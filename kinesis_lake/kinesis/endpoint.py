"""Local Kinesis endpoints (kinesalite or moto) for tests, the demo and benchmarks.

Both run as child processes bound to 127.0.0.1. moto could run in-process
(``ThreadedMotoServer``), but a subprocess is chosen for both kinds so that ``kill()``
means the same thing everywhere (a real crash, for crash tests), the server's state and CPU
work stay out of the test process (no GIL contention with the reader under test, no
interference with ``moto.mock_aws`` elsewhere), and the server's log can be shown when it
fails to start.

kinesalite is preferred: it persists to disk, survives kill -9, closes split shards
correctly, produces realistic sequence numbers and is about ten times faster on puts.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import boto3
from botocore.config import Config

from kinesis_lake.errors import KinesisError

ENDPOINT_KIND_SETTING = "KINESIS_LAKE_ENDPOINT_KIND"
NODE_MODULES_SETTING = "KINESIS_LAKE_NODE_MODULES"
ENDPOINT_KINDS = ("auto", "kinesalite", "moto")

_LAUNCHER = Path(__file__).with_name("kinesalite_launcher.js")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_READY_LINE = re.compile(r"kinesalite listening on http://127\.0\.0\.1:(\d+)")
_INSTALL_HINT = "run `make setup` or `npm install --prefix .local/node kinesalite@3.3.3`"
_POLL_S = 0.05
_STOP_GRACE_S = 5.0


LOCAL_ENDPOINT_PORT = 4567
"""Where ``kinesis-lake endpoint`` and ``make dev`` serve Kinesis (profiles/local.env says so)."""


def find_node_package(
    name: str, marker: str = "package.json", node_modules: Path | None = None
) -> Path | None:
    """The npm package ``name``'s directory (holding ``marker``), or None.

    Looked up in ``node_modules``, else ``$KINESIS_LAKE_NODE_MODULES``, else
    ``.local/node/node_modules`` under the repository (next to this package) or under the
    current directory.
    """
    if node_modules is not None:
        candidates = [node_modules]
    elif os.environ.get(NODE_MODULES_SETTING):
        candidates = [Path(os.environ[NODE_MODULES_SETTING])]
    else:
        local = Path(".local", "node", "node_modules")
        candidates = [_PACKAGE_ROOT / local, Path.cwd() / local]
    for candidate in candidates:
        module = candidate / name
        if (module / marker).is_file():
            return module.resolve()
    return None


def find_kinesalite(node_modules: Path | None = None) -> Path | None:
    """The kinesalite module directory, or None (see :func:`find_node_package`)."""
    return find_node_package("kinesalite", node_modules=node_modules)


def resolve_endpoint_kind(kind: str, *, node_modules: Path | None = None) -> str:
    """Turn "auto" into a concrete kind and check that the chosen kind can run here."""
    if kind not in ENDPOINT_KINDS:
        raise ValueError(
            f"{ENDPOINT_KIND_SETTING}={kind!r} is not valid; use one of {', '.join(ENDPOINT_KINDS)}"
        )
    has_node = shutil.which("node") is not None
    has_module = find_kinesalite(node_modules) is not None
    if kind == "kinesalite" or (kind == "auto" and has_node and has_module):
        if not has_node:
            raise FileNotFoundError(f"kinesalite needs Node.js (`node` on PATH); {_INSTALL_HINT}")
        if not has_module:
            raise FileNotFoundError(
                f"the kinesalite npm module was not found (set {NODE_MODULES_SETTING} to its "
                f"node_modules folder); {_INSTALL_HINT}"
            )
        return "kinesalite"
    if importlib.util.find_spec("moto") is None:
        raise FileNotFoundError(
            "no local Kinesis endpoint available: moto is not installed (pip install "
            f"'moto[server]') and kinesalite is not set up ({_INSTALL_HINT})"
        )
    return "moto"


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for servers that cannot pick one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalKinesisEndpoint:
    """A kinesalite or moto server on 127.0.0.1, as a context manager.

    With ``data_dir`` (kinesalite only) streams and records persist across ``stop()`` /
    ``kill()`` and ``start()``. A restart reuses the first port, so ``url`` stays valid
    for clients built before the restart.
    """

    def __init__(
        self,
        kind: str = "auto",
        *,
        port: int | None = None,
        data_dir: Path | None = None,
        node_modules: Path | None = None,
    ) -> None:
        self._kind = resolve_endpoint_kind(kind, node_modules=node_modules)
        if data_dir is not None and self._kind != "kinesalite":
            raise ValueError(
                f"data_dir needs kinesalite ({ENDPOINT_KIND_SETTING}=kinesalite): moto keeps "
                "its state in memory only"
            )
        self._port = port
        self._data_dir = data_dir
        self._module = find_kinesalite(node_modules)
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._first_start: tuple[dict[str, str], str] | None = None  # environment, folder

    @classmethod
    def keeping_data_in(
        cls, data_dir: Path, kind: str = "auto", *, port: int | None = None
    ) -> LocalKinesisEndpoint:
        """An endpoint whose streams outlive it where the kind allows: kinesalite keeps
        them under ``data_dir``; moto (the fallback without Node) can only keep them in
        memory, so with moto a stream lasts as long as the endpoint process."""
        resolved = resolve_endpoint_kind(kind)
        return cls(resolved, port=port, data_dir=data_dir if resolved == "kinesalite" else None)

    @property
    def kind(self) -> str:
        """The resolved kind: "kinesalite" or "moto"."""
        return self._kind

    @property
    def url(self) -> str:
        if self._port is None or self._process is None:
            raise RuntimeError("the endpoint is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the endpoint is not started")
        return self._process.pid

    def revive(self) -> str | None:
        """Start the server again if it exited on its own and return what it printed and
        its exit status; None if it is running.

        It comes back on the same port, with the environment and folder of its first start,
        and empty unless it keeps its data (``data_dir``). For a long-lived shared endpoint
        (the test suite's): a server that died would otherwise refuse every later client,
        and its output, which says why, would be deleted with it.
        """
        if self._process is None or self._process.poll() is None:
            return None
        last_words = f"{self._log()}\n[{self._kind} exited with status {self._process.returncode}]"
        self._end(signal.SIGKILL)
        try:
            self.start()
        except Exception as error:
            raise KinesisError(
                f"{self._kind} died and could not be started again ({error}); before dying "
                f"it printed:\n{last_words}"
            ) from error
        return last_words

    def start(self, timeout_s: float = 20.0) -> LocalKinesisEndpoint:
        """Start the server and wait until it answers ListStreams."""
        if self._process is not None:
            raise RuntimeError("the endpoint is already running")
        log_fd, log_name = tempfile.mkstemp(prefix=f"{self._kind}-", suffix=".log")
        self._log_path = Path(log_name)
        if self._kind == "kinesalite":
            if self._data_dir is not None:
                self._data_dir.mkdir(parents=True, exist_ok=True)
            command = [
                "node",
                str(_LAUNCHER),
                str(self._module),
                str(self._port or 0),
                *([str(self._data_dir)] if self._data_dir is not None else []),
            ]
        else:
            self._port = self._port or free_port()
            command = [
                sys.executable,
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                str(self._port),
            ]
        if self._first_start is None:
            self._first_start = (dict(os.environ), os.getcwd())
        env, cwd = self._first_start
        with os.fdopen(log_fd, "wb") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
            )
        try:
            self._wait_ready(self._process, time.monotonic() + timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        if self._kind == "kinesalite":
            while (match := _READY_LINE.search(self._log())) is None:
                self._check_alive(process, deadline)
                time.sleep(_POLL_S)
            self._port = int(match.group(1))
        # Local endpoints ignore credentials and signatures; these placeholders only let
        # botocore sign the probe without depending on the caller's environment.
        probe = boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
        ).client(
            "kinesis",
            endpoint_url=f"http://127.0.0.1:{self._port}",
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2),
        )
        while True:
            try:
                probe.list_streams()
                return
            except Exception:
                self._check_alive(process, deadline)
                time.sleep(_POLL_S)

    def _check_alive(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        if process.poll() is not None:
            raise KinesisError(
                f"{self._kind} exited with code {process.returncode} while starting; "
                f"its output:\n{self._log()}"
            )
        if time.monotonic() > deadline:
            raise KinesisError(
                f"{self._kind} did not answer ListStreams in time; its output:\n{self._log()}"
            )

    def _log(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the server has not exited within a few seconds."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: an abrupt crash, for crash-recovery tests."""
        self._end(signal.SIGKILL)

    def _end(self, first_signal: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(first_signal)
            try:
                process.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> LocalKinesisEndpoint:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
