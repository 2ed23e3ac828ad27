"""The Postgres server the production tests use, and throwaway databases on it.

Postgres is a real dependency of these tests (the Iceberg SQL catalog and Dagster's
storage run on it in production), so an unreachable server FAILS the tests with the
command that starts one; it never skips them silently. Where it is looked for:
``KINESIS_LAKE_TEST_PG_HOST`` / ``_PORT`` / ``_USER`` (default 127.0.0.1:5432, postgres).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from urllib.parse import quote

import psycopg2
import pytest
from psycopg2 import sql

START_HINT = (
    "Start the local cluster with `pg_ctlcluster --skip-systemctl-redirect 15 main start` "
    "(Debian: apt-get install postgresql), or point KINESIS_LAKE_TEST_PG_HOST / "
    "KINESIS_LAKE_TEST_PG_PORT / KINESIS_LAKE_TEST_PG_USER at a server that lets that user "
    "create databases."
)


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str

    def connect(self, database: str = "postgres"):
        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, dbname=database, connect_timeout=5
        )

    def query(self, database: str, statement: str, *params: object) -> list[tuple]:
        """Rows of one read-only query, on a connection closed straight after."""
        with closing(self.connect(database)) as connection, connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()

    def sqlalchemy_url(self, database: str, password: str | None = None) -> str:
        """The URL pyiceberg's SQL catalog takes (``PYICEBERG_CATALOG__<NAME>__URI``)."""
        credentials = self.user if password is None else f"{self.user}:{quote(password, safe='')}"
        return f"postgresql+psycopg2://{credentials}@{self.host}:{self.port}/{database}"

    @contextmanager
    def temporary_database(self) -> Iterator[str]:
        """A new, empty database for one test; dropped afterwards, open connections too."""
        name = f"kinesis_lake_test_{uuid.uuid4().hex[:12]}"
        self._execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield name
        finally:
            self._execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def _execute(self, statement: sql.Composable) -> None:
        with closing(self.connect()) as connection:
            connection.autocommit = True  # CREATE / DROP DATABASE refuse transactions
            with connection.cursor() as cursor:
                cursor.execute(statement)


def reachable_postgres() -> PostgresServer:
    """The configured server, after proving it answers; pytest.fail with the fix if not."""
    server = PostgresServer(
        host=os.environ.get("KINESIS_LAKE_TEST_PG_HOST", "127.0.0.1"),
        port=int(os.environ.get("KINESIS_LAKE_TEST_PG_PORT", "5432")),
        user=os.environ.get("KINESIS_LAKE_TEST_PG_USER", "postgres"),
    )
    try:
        server.connect().close()
    except psycopg2.OperationalError as error:
        problem = str(error).strip()
    else:
        return server
    pytest.fail(
        f"No Postgres at {server.user}@{server.host}:{server.port} ({problem}). "
        f"These tests need one. {START_HINT}",
        pytrace=False,
    )
