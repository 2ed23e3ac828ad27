"""Where the data sources run: the Spark session, the Connect server and Python workers.

The top of the Spark layer: the session registers both data sources and the worker daemon
preloads them, so this package imports the connectors and never the other way round.

* ``session``: the local or cluster session kinesis-lake builds, with the sources
  registered and the worker daemon set.
* ``connect_server``: a lingering local Spark Connect server (``make dev``).
* ``worker_daemon``: Python workers forked with this project's imports done once.
* ``daemon_reaper``: stops the Python daemons a Connect server keeps for ended queries.
* ``class_archive``, ``record_class_archive``, ``compiled_pyspark``: faster JVM and
  Python starts (a class-data archive, PySpark compiled ahead of time).
"""
