"""Where the data sources run: the Spark session, the Connect server and Python workers.

The top of the Spark layer: the session registers both data sources and the worker daemon
preloads them, so this package imports the connectors and never the other way round.

* ``session``: the local or cluster session kinesis-lake builds, with the sources
  registered and the worker daemon set.
* ``connect_server``: a lingering local Spark Connect server (``make dev``), and
  ``connect_server_main``, the driver it submits, whose sessions share Python processes.
* ``worker_daemon``: Python workers forked with this project's imports done once.
* ``class_archive``, ``record_class_archive``, ``compiled_pyspark``: faster JVM and
  Python starts (a class-data archive, PySpark compiled ahead of time).
"""
