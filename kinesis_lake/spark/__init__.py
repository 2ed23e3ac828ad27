"""The Spark layer: two data sources, the executor code the jobs run, and their runtime.

* ``kinesis``: the ``kinesis`` streaming source.
* ``iceberg``: the ``kinesis_lake_iceberg`` sink and readers.
* ``routing``: routing raw records to their tables on executors (the derive job's).
* ``runtime``: the session, the Connect server and the Python workers they run in.
* ``worker_process``, ``spark_version``, ``datasource_api``: what every data source needs of
  its process (its imports kept out of the garbage collector's way; the Spark versions it
  runs on and what the driver does differently on each; PySpark's data source classes as
  each version has them).

One way within the layer: runtime -> data sources and routing -> those three modules.
The data sources take their options from Spark, never from ``kinesis_lake.config``, so
they run under any driver; the pipeline jobs (``kinesis_lake.pipeline``) compose them.
"""
