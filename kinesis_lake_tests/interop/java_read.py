"""Read Iceberg tables with Apache Iceberg's Java implementation (Spark 3.5 and the Iceberg
Spark runtime), by metadata file, and print each one's row count and every column decoded.

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
for metadata in metadata_files:
    table = spark.read.format("iceberg").load(metadata)
    # Rendering every row as JSON makes the reader decode every column, nested ones too.
    (row,) = table.selectExpr("count(*) AS n", "sum(length(to_json(struct(*)))) AS chars").collect()
    found[metadata] = {"rows": row["n"], "json_chars": row["chars"] or 0}
spark.stop()
print("ICEBERG_JAVA " + json.dumps(found))
