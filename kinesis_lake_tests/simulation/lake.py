"""The simulation's lake: a real SQLite Iceberg catalog that fails commits on demand.

The catalog is :class:`~kinesis_lake_tests.ambiguous_catalog.AmbiguousCatalog` (commits
that land then raise, or raise before landing), configured the way every test configures
it (``catalog_environment``), so the sink's own ``SinkOptions.load_table`` opens it.
Another writer's commit interleaved at the commit point uses ``pause_commits``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyiceberg.table import Table

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.spark.iceberg.options import SinkOptions
from kinesis_lake.spark.iceberg.writer import IcebergStreamWriter
from kinesis_lake_tests.ambiguous_catalog import arm, catalog_environment, pause_commits

CATALOG = "kinesis_lake"
RAW = "lake.raw"


@contextmanager
def lake_environment(root: Path) -> Iterator[Path]:
    """Point catalog ``kinesis_lake`` at an AmbiguousCatalog under ``root`` for the block.

    Returns the fault file. The environment is restored afterwards, so the simulation can
    run inside pytest (whose fixtures isolate ``PYICEBERG_*``) or from the command line.
    """
    fault_file = root / "faults.json"
    variables = catalog_environment(root / "data", fault_file)
    saved = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    try:
        yield fault_file
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Lake:
    """The raw table of one simulated deployment, and the faults armed on its catalog."""

    def __init__(self, root: Path, fault_file: Path) -> None:
        self.data_dir = root / "data"
        self.fault_file = fault_file
        self._rows: tuple[str, Counter[tuple[str, str, int]]] | None = None
        # One catalog for the simulation's own reads (the code under test opens its own,
        # as it does in production): opening one costs more than the load it serves.
        self._catalog = open_catalog(CATALOG, data_dir=self.data_dir)
        ensure_namespace(self._catalog, "lake")
        ensure_raw_table(self._catalog, RAW)

    def table(self) -> Table:
        return self._catalog.load_table(RAW)

    def writer(self, writer_id: str, batch_id: int) -> IcebergStreamWriter:
        """The sink's write half as the ingestion query configures it, for one batch.

        ``batchId`` stands in for the micro-batch id Spark gives each task (a local
        property of its TaskContext, absent outside Spark).
        """
        options = SinkOptions.parse(
            {
                "batchId": str(batch_id),
                "table": RAW,
                "catalog": CATALOG,
                "dataDir": str(self.data_dir),
                "writerId": writer_id,
                "batchIdColumn": "batch_id",
                "positionColumns": "shard_id,sequence_number",
            }
        )
        return IcebergStreamWriter(options, TableWriteTarget.from_table(options.load_table()))

    def arm(self, mode: str, error: str) -> None:
        arm(self.fault_file, mode, error=error, table=RAW)

    def apply_late_commits(self) -> list[bool]:
        """The catalog applies the commits it held (``LANDS_LATE``); True for each landed."""
        from kinesis_lake_tests.ambiguous_catalog import apply_late_commits

        return apply_late_commits(self._catalog)  # type: ignore[arg-type]

    def rows(self) -> Counter[tuple[str, str, int]]:
        """Every (shard, sequence number, sub-sequence number) in the table, with counts.

        Scanned again only when the table's metadata changed since the last call.
        """
        table = self.table()
        if self._rows is not None and self._rows[0] == table.metadata_location:
            return self._rows[1]
        data = table.scan(
            selected_fields=("shard_id", "sequence_number", "sub_sequence_number")
        ).to_arrow()
        rows = Counter(
            zip(
                data.column("shard_id").to_pylist(),
                data.column("sequence_number").to_pylist(),
                data.column("sub_sequence_number").to_pylist(),
                strict=True,
            )
        )
        self._rows = (table.metadata_location, rows)
        return rows


@contextmanager
def interleaved(other_commit: Callable[[], object]) -> Iterator[None]:
    """Run ``other_commit`` once, inside the next commit of this process, after that
    commit's caller loaded its table and staged its transaction: the race window."""
    fired = False

    def hook(_table: str) -> None:
        nonlocal fired
        if not fired:
            fired = True
            other_commit()

    with pause_commits(hook):
        yield
