"""Pipeline jobs: they read ``Settings``, open the lake and compose the libraries.

Dagster-free, so the CLI, the Dagster assets, the soak and the tests run the very same
code. Dependencies point down only: cli/defs -> pipeline -> spark, iceberg, kinesis.
"""
