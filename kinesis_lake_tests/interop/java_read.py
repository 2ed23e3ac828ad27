"""Read Iceberg tables with Apache Iceberg's Java implementation (Spark 3.5 and the Iceberg
Spark runtime), by metadata file, and print each one's row count and every column decoded
(the rows too, of a small table).

Runs in its own virtualenv (pyspark 3.5, see ``iceberg_java.py``): it imports nothing of
ours. Loopback only, like every Spark process of the project.
"""

import json
import sys

from pyspark.sql import SparkSession

jars, metadata_files = sys.argv[1], sys.argv[2:]
spark = (
    SparkSession.builder.master("local[1]")
    .appName("iceberg-java-reader")
    .config("spark.jars", jars)
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.session.timeZone", "UTC")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
found = {}
# Every row as JSON, nulls kept, times to the microsecond: values a test can compare.
AS_JSON = (
    "to_json(struct(*), map('ignoreNullFields', 'false', "
    "'timestampFormat', 'yyyy-MM-dd\\'T\\'HH:mm:ss.SSSSSSXXX', "
    "'timestampNTZFormat', 'yyyy-MM-dd\\'T\\'HH:mm:ss.SSSSSS'))"
)
SMALL = 1000
"""Tables of at most this many rows also give their rows back, rendered."""
for metadata in metadata_files:
    table = spark.read.format("iceberg").load(metadata).selectExpr(f"{AS_JSON} AS json")
    # Rendering every row as JSON makes the reader decode every column, nested ones too.
    (row,) = table.selectExpr("count(*) AS n", "sum(length(json)) AS chars").collect()
    found[metadata] = {"rows": row["n"], "json_chars": row["chars"] or 0}
    if row["n"] <= SMALL:
        found[metadata]["rendered"] = [r["json"] for r in table.collect()]
spark.stop()
print("ICEBERG_JAVA " + json.dumps(found))
