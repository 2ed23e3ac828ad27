"""Table metadata parsed once per metadata file, not once per read.

A streaming writer's commit reads the table's current ``*.metadata.json`` three times:
the sink loads the table, and the catalog loads it again inside ``commit_table`` to check
the commit's requirements (SQL, Glue, Hive and DynamoDB catalogs all do), each time
fetching the file (a GET on S3) and parsing JSON that lists every retained snapshot. And
the file is the one this process wrote at the previous commit. Benchmark 5 measured that
parsing as a fifth of a commit, growing with the snapshots the table keeps.

Iceberg metadata files are immutable: every commit writes a new file under a new name
(version number and UUID) and only swaps the catalog's pointer. So the parsed metadata
of a location can be kept and handed out again, and what this process writes can be
kept as it is written. pyiceberg replaces rather than mutates the models (every update
goes through ``model_copy``), but they fill lazy caches (``cached_property``, a schema's
field indexes) in their ``__dict__`` on first use, and an update deep-copies them: one
parse used by two threads at once raised "dictionary changed size during iteration"
(a backfill thread committing beside ingestion). So each thread keeps its own parses,
under a token of its own (never a reused thread id); one thread's loads and commits, the
case benchmark 5 measured, still share them. The catalog pointer itself is still read
on every load, so a commit by another process is seen as soon as it lands.

pyiceberg has no hook for this, so :func:`install` wraps its two serializer entry points
(``FromInputFile.table_metadata`` and ``ToOutputFile.table_metadata``), pinned to the
version in pyproject.toml. REST catalogs parse server responses instead and gain nothing.
The wrap is process-wide: it would serve stale metadata only for a file rewritten in
place under the same name, which pyiceberg never does (every name carries a UUID) but a
Hadoop-style table's ``vN.metadata.json``, rolled back in place by another engine and
read with ``StaticTable`` in the same long-lived process, could.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyiceberg.io import InputFile, OutputFile
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.metadata import TableMetadata

TABLES = 16
"""Tables kept (least recently used first out)."""
VERSIONS_PER_TABLE = 2
"""Metadata files kept per table: the newest ones. A busy table writes a new file every
commit; older ones are never read again, and one can be megabytes of parsed snapshots."""


class MetadataCache:
    """Parsed table metadata by metadata file location and thread, at most ``versions``
    per table (per metadata directory) and thread, and ``tables`` tables and threads."""

    def __init__(self, tables: int = TABLES, versions: int = VERSIONS_PER_TABLE) -> None:
        self._tables: OrderedDict[tuple[int, str], OrderedDict[str, TableMetadata]] = OrderedDict()
        self._max_tables, self._max_versions = tables, versions
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, location: str) -> TableMetadata | None:
        directory = _directory(location)
        with self._lock:
            versions = self._tables.get(directory)
            metadata = versions.get(location) if versions is not None else None
            if versions is None or metadata is None:
                self.misses += 1
                return None
            self._tables.move_to_end(directory)
            self.hits += 1
            return metadata

    def put(self, location: str, metadata: TableMetadata) -> None:
        directory = _directory(location)
        with self._lock:
            versions = self._tables.setdefault(directory, OrderedDict())
            versions[location] = metadata
            versions.move_to_end(location)
            while len(versions) > self._max_versions:
                versions.popitem(last=False)
            self._tables.move_to_end(directory)
            while len(self._tables) > self._max_tables:
                self._tables.popitem(last=False)

    def entries(self) -> int:
        with self._lock:
            return sum(len(versions) for versions in self._tables.values())


def _directory(location: str) -> tuple[int, str]:
    """The table's key: this thread's token and the metadata file's directory."""
    return _thread_token(), location.rsplit("/", 1)[0]


_tokens = itertools.count()
_this_thread = threading.local()


def _thread_token() -> int:
    token: int | None = getattr(_this_thread, "token", None)
    if token is None:
        token = _this_thread.token = next(_tokens)
    return token


CACHE = MetadataCache()
_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Route pyiceberg's metadata file reads and writes through :data:`CACHE` (idempotent)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        read: Callable[..., TableMetadata] = FromInputFile.table_metadata
        write: Callable[..., None] = ToOutputFile.table_metadata

        def cached_read(input_file: InputFile, *args: Any, **kwargs: Any) -> TableMetadata:
            metadata = CACHE.get(input_file.location)
            if metadata is None:
                metadata = read(input_file, *args, **kwargs)
                CACHE.put(input_file.location, metadata)
            return metadata

        def caching_write(
            metadata: TableMetadata, output_file: OutputFile, *args: Any, **kwargs: Any
        ) -> None:
            write(metadata, output_file, *args, **kwargs)
            CACHE.put(output_file.location, metadata)

        FromInputFile.table_metadata = staticmethod(cached_read)  # type: ignore[method-assign]
        ToOutputFile.table_metadata = staticmethod(caching_write)  # type: ignore[method-assign]
        _installed = True
