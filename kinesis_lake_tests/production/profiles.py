"""The shipped profiles, read as a deployment reads them, and made safe to run locally.

``aws_profile_env`` takes ``profiles/aws.env.example`` as it is and changes only what a
machine without AWS must change; each change is listed here so the difference between
"tested" and "production" is visible in one place:

* the bucket placeholder becomes a fresh moto bucket;
* every AWS service gets the moto endpoint (Kinesis, Glue, S3), and ``AWS_ENDPOINT_URL``
  catches any client that is built without one;
* placeholder credentials are exported (the boto3 / AWS SDK chain reads them) and the
  instance metadata service is disabled, so nothing probes 169.254.169.254;
* ``KINESIS_LAKE_CHECKPOINT_DIR`` becomes a local folder: Spark cannot checkpoint to
  s3:// without the hadoop-aws jar (see docs/operations.md, "Honest limits");
* ``SPARK_MASTER`` becomes local[2] (tests choose a standalone cluster explicitly);
* a fresh stream name with 2 shards, and local scratch under the test's tmp folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kinesis_lake.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
AWS_PROFILE = REPO_ROOT / "profiles" / "aws.env.example"
LOCAL_PROFILE = REPO_ROOT / "profiles" / "local.env"
CATALOG_PREFIX = "PYICEBERG_CATALOG__KINESIS_LAKE__"
BUCKET_PLACEHOLDER = "YOUR-LAKE-BUCKET"
PLACEHOLDER_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "kinesis-lake-test",
    "AWS_SECRET_ACCESS_KEY": "kinesis-lake-test",
}


def read_profile(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines, as ``kinesis-lake --profile`` applies them (comments skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def aws_profile_env(
    *, bucket: str, endpoint_url: str, stream_name: str, local_dir: Path
) -> dict[str, str]:
    """The AWS profile with the local substitutions listed in the module docstring."""
    env = {
        key: value.replace(BUCKET_PLACEHOLDER, bucket)
        for key, value in read_profile(AWS_PROFILE).items()
    }
    env.update(PLACEHOLDER_CREDENTIALS)
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint_url,
            "AWS_EC2_METADATA_DISABLED": "true",
            "KINESIS_ENDPOINT_URL": endpoint_url,
            f"{CATALOG_PREFIX}GLUE__ENDPOINT": endpoint_url,
            f"{CATALOG_PREFIX}S3__ENDPOINT": endpoint_url,
            "KINESIS_STREAM_NAME": stream_name,
            "KINESIS_SHARD_COUNT": "2",
            "KINESIS_LAKE_DATA_DIR": str(local_dir / "scratch"),
            "KINESIS_LAKE_CHECKPOINT_DIR": str(local_dir / "checkpoints"),
            "SPARK_MASTER": "local[2]",
        }
    )
    return env


def isolate_environment(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Forget the developer's lake configuration: settings, pyiceberg config, endpoints.

    HOME moves too, because pyiceberg also reads ``~/.pyiceberg.yaml`` and boto3 reads
    ``~/.aws``: the tests must see only what they set. Every ``AWS_*`` variable goes
    (profiles, session tokens, role files): only placeholder credentials remain.
    """
    settings_variables = {variable for variable, _, _ in Settings().describe()}
    settings_variables.add("KINESIS_LAKE_PROFILE")  # the CLI would load that file too
    for name in list(os.environ):
        upper = name.upper()
        if name in settings_variables or upper.startswith(("PYICEBERG_", "AWS_", "DAGSTER_")):
            monkeypatch.delenv(name)
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key, value in PLACEHOLDER_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.chdir(home)
