"""The thin Dagster layer: it starts, observes and checks; the pipeline lives elsewhere.

* ``resources``: settings, the Kinesis client and the Spark session, all from env.
* ``streams``: each stream's Dagster names, the stream as an external asset, its freshness.
* ``raw_assets``: raw_events (one raw table per stream); ``derived_assets``: the derived tables.
* ``checks``: exactly-once and keeping-up checks, numbers from ``kinesis_lake.pipeline.reconcile``:
  ``raw_checks`` of each raw table, ``table_checks`` of the tables they feed;
  ``check_verdicts``: checks a step evaluates after its commit, each dated when it ran.
* ``follow``: an ingestion run's thread that checks each raw commit and brings
  the downstream tables along.
* ``sensors``: the backlog sensor and the declarative-automation sensor.
* ``jobs``: the named jobs; ``maintenance``: the upkeep job (ops, not assets) and its
  schedule (``KINESIS_LAKE_MAINTENANCE_CRON``).

``kinesis_lake.definitions`` puts them together into the one ``dg.Definitions``.
"""
