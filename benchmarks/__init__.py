"""kinesis-lake benchmarks: what the pipeline costs, measured against simple baselines.

Run ``make bench`` (quick, about half an hour on 2 cores) or ``make bench-full``. Each benchmark
is one module with a ``run(ctx)`` function returning a JSON-able result; ``run.py`` runs
them side by side against one local kinesalite endpoint and writes
``benchmarks/results/<name>.json``, ``REPORT.md`` and PNG plots.

Ratios are what count: the machine these run on is usually shared and noisy, so every
comparison is made between things measured moments apart in the same run.
"""
