"""Which Iceberg catalog the lake uses, resolved the way pyiceberg users already expect.

A deployment chooses its catalog with pyiceberg's own configuration (``.pyiceberg.yaml``
or ``PYICEBERG_CATALOG__<NAME>__<KEY>`` environment variables), so moving from the laptop
default to Glue + S3 or a Postgres SQL catalog is configuration, not code. When nothing
configures the catalog, an embedded SQLite catalog under the data directory is used, so
a fresh checkout runs with no setup.

Catalog properties can carry credentials (a Postgres password in the URI, S3 keys):
nothing here logs them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.utils.config import Config
from sqlalchemy import select
from sqlalchemy.orm import Session

from kinesis_lake.errors import TableError
from kinesis_lake.iceberg import metadata_cache, pyiceberg_fixes
from kinesis_lake.iceberg.defaults import DEFAULT_CATALOG_NAME

logger = logging.getLogger(__name__)

# Every table we read or write is loaded through a catalog opened here, so the work-arounds
# are in place before any of it; applied here rather than on importing kinesis_lake.iceberg,
# which Spark's planner processes do only for the sink's options and must not pay for.
pyiceberg_fixes.apply()


class DataDirMovedError(TableError, RuntimeError):
    """The local catalog's tables live outside its data directory: it was moved or copied."""


def local_catalog_properties(data_dir: Path) -> dict[str, str]:
    """Properties of the embedded default: a SQLite SQL catalog and a local warehouse.

    Paths are made absolute so the same properties work from Spark executor processes
    whose working directory differs from the driver's.
    """
    root = data_dir.expanduser().resolve()
    return {
        "type": "sql",
        "uri": f"sqlite:///{root / 'catalog.db'}",
        "warehouse": (root / "warehouse").as_uri(),
    }


def configured_catalog_properties(name: str) -> dict[str, str] | None:
    """The properties pyiceberg's configuration gives catalog ``name``, or None.

    Read through a fresh ``Config`` rather than ``load_catalog``'s copy, which pyiceberg
    takes once when ``pyiceberg.catalog`` is imported and so misses environment changes
    made later in the process (tests, a CLI that sets variables before opening).

    pyiceberg turns ``_`` into ``-`` in environment variable names, so
    ``PYICEBERG_CATALOG__KINESIS_LAKE__URI`` configures a catalog called ``kinesis-lake``;
    both spellings are accepted so the obvious variable name works.
    """
    config = Config()
    for candidate in dict.fromkeys((name, name.replace("_", "-"))):
        found = config.get_catalog_config(candidate)
        if found:
            return {key: str(value) for key, value in found.items()}
    return None


def catalog_properties(name: str = DEFAULT_CATALOG_NAME, *, data_dir: Path) -> dict[str, str]:
    """The complete properties of catalog ``name``: configured ones, else the local default.

    Enough to open the same catalog in another process (``load_catalog(name, **props)``).
    They may contain secrets: pass them on, never log them.
    """
    return configured_catalog_properties(name) or local_catalog_properties(data_dir)


def open_catalog(name: str = DEFAULT_CATALOG_NAME, *, data_dir: Path) -> Catalog:
    """Open catalog ``name`` as configured for pyiceberg, else the embedded local default."""
    metadata_cache.install()
    configured = configured_catalog_properties(name)
    if configured is not None:
        logger.info("Opening configured Iceberg catalog %r", name)
        return load_catalog(name, **configured)
    root = data_dir.expanduser().resolve()
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    logger.info("Opening the local Iceberg catalog %r under %s", name, root)
    # Constructed directly so no stale configuration of the same name is merged in.
    properties = local_catalog_properties(root)
    catalog = SqlCatalog(name, **properties)
    _refuse_relocated(catalog, root, properties["warehouse"])
    return catalog


def _refuse_relocated(catalog: SqlCatalog, root: Path, warehouse: str) -> None:
    """Fail when the catalog points at tables outside this data directory's warehouse.

    Iceberg records absolute locations (catalog -> metadata -> manifests -> data files),
    so a data directory copied or moved to another path still points at the old one:
    with the old copy present, new commits would silently write into it; without it,
    every read fails on a missing file. Both are refused here, with the way out.
    """
    with Session(catalog.engine) as session:
        stray = session.scalars(
            select(IcebergTables.metadata_location)
            .where(IcebergTables.catalog_name == catalog.name)
            .where(IcebergTables.metadata_location.is_not(None))
            .where(~IcebergTables.metadata_location.startswith(f"{warehouse}/", autoescape=True))
            .limit(1)
        ).first()
    if stray is not None:
        raise DataDirMovedError(
            f"The local catalog {root / 'catalog.db'} refers to table metadata at {stray}, "
            f"outside {warehouse}: this data directory was moved or copied from another "
            "path. Iceberg stores absolute file locations, so a local data directory only "
            "works at the path it was created at: put it back there (on another machine, "
            "mount or restore it at that same path). To move a lake freely, keep its tables "
            "in an object store (profiles/aws.env.example)."
        )


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Create ``namespace`` unless it exists (safe when two processes race to create it)."""
    catalog.create_namespace_if_not_exists(namespace)
