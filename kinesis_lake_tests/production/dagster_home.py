"""A ``$DAGSTER_HOME`` whose instance keeps runs, events and schedules in Postgres.

It is the repository's own ``dagster.yaml`` (pools, run monitoring, telemetry) with the
``storage: postgres:`` block that ``dagster.yaml`` documents for production. Connection
settings are ``{env: ...}`` references, so the password is read from the environment
when the instance starts and never written into the file.

``scheme: postgresql+psycopg2`` is required, not decoration: dagster-postgres builds a
``postgresql://`` URL by default, which SQLAlchemy 2.1 maps to psycopg 3, and the
``postgres`` extra installs psycopg2 (what dagster-postgres itself depends on).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kinesis_lake_tests.production.postgres import PostgresServer
from kinesis_lake_tests.production.profiles import REPO_ROOT


def postgres_dagster_home(home: Path) -> Path:
    """Write ``home/dagster.yaml``: the repository's settings, storage on Postgres."""
    config = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text()) or {}
    config["storage"] = {
        "postgres": {
            "postgres_db": {
                "hostname": {"env": "DAGSTER_PG_HOST"},
                "port": {"env": "DAGSTER_PG_PORT"},
                "db_name": {"env": "DAGSTER_PG_DB"},
                "username": {"env": "DAGSTER_PG_USER"},
                "password": {"env": "DAGSTER_PG_PASSWORD"},
                "scheme": "postgresql+psycopg2",
            }
        }
    }
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def postgres_dagster_env(
    server: PostgresServer, database: str, *, password: str, home: Path
) -> dict[str, str]:
    """The variables ``postgres_dagster_home``'s file refers to, plus DAGSTER_HOME."""
    return {
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": server.host,
        "DAGSTER_PG_PORT": str(server.port),
        "DAGSTER_PG_USER": server.user,
        "DAGSTER_PG_PASSWORD": password,
        "DAGSTER_PG_DB": database,
    }
