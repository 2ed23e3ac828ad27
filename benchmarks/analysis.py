"""The "what limits it" section of REPORT.md, written from this run's own evidence.

Each paragraph quotes numbers measured in the run (CPU seconds per process kind, Spark's
per-phase batch durations, rows read per derive step, commit latency against retained
snapshots) and, when ``benchmarks.profile`` has been run, the py-spy shares of the
functions that matter. Nothing here is tuned per run: the same rules read every result,
so a fixed bug shows up as a smaller share and a better ratio.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any


def _profile(results_dir: Path, name: str) -> dict[str, Any] | None:
    path = results_dir / f"profile_{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _share(profile: dict[str, Any] | None, *needles: str, key: str = "top_inclusive") -> float:
    """Largest share among frames containing all ``needles`` (0 when absent)."""
    if profile is None:
        return 0.0
    rows = profile.get(key, []) + profile.get("top_self", [])
    found = [r["share"] for r in rows if all(n in r["frame"] for n in needles)]
    return max(found, default=0.0)


def _bucket(profile: dict[str, Any] | None, prefix: str) -> float:
    """Share of samples in the named cost bucket (see ``benchmarks.profile.BUCKETS``)."""
    if profile is None:
        return 0.0
    return max(
        (v for k, v in profile.get("buckets", {}).items() if k.startswith(prefix)), default=0.0
    )


def _gc_share(profile: dict[str, Any] | None) -> float:
    return _bucket(profile, "gc.collect()")


def _pct(value: float) -> str:
    return f"{value:.0%}"


def _profile_note(profile: dict[str, Any] | None) -> str:
    if profile is None:
        return (
            " (No py-spy profile in this results directory: run `.venv/bin/pip install "
            "py-spy && python -m benchmarks.profile` to add the function-level evidence.)"
        )
    return (
        f" Profile: {profile['title']}, {profile['samples']:,} non-idle samples, "
        f"{profile['environment']['timestamp']}."
    )


def _cpu_paragraph(result: dict[str, Any], ingest_profile: dict[str, Any] | None) -> str:
    ours = result["cpu_s_per_100k_records"]["ours_warm"]
    plain = result["cpu_s_per_100k_records"]["plain_reader_best"]
    ours_total = sum(v for k, v in ours.items() if k in ("python", "jvm", "kinesalite"))
    plain_total = plain.get("reader", 0.0) + plain.get("kinesalite", 0.0)
    busy = result["ours"]["runs"]["warm"].get("cpu_per_wall_s", {})
    used = sum(v for k, v in busy.items() if k in ("python", "jvm", "kinesalite"))
    gc = _gc_share(ingest_profile)
    ts = _bucket(ingest_profile, "botocore timestamp")
    imports = _bucket(ingest_profile, "imports in Python workers")
    client = _bucket(ingest_profile, "Kinesis client")
    get_records = _bucket(ingest_profile, "GetRecords request")
    text = (
        f"**CPU per record.** Per 100k records our warm run cost {ours_total:.1f} "
        f"CPU-seconds (Python {ours.get('python', 0):.1f}, JVM {ours.get('jvm', 0):.1f}, "
        f"kinesalite {ours.get('kinesalite', 0):.1f}); the plain reader cost "
        f"{plain_total:.1f} (its own {plain.get('reader', 0):.1f}, kinesalite "
        f"{plain.get('kinesalite', 0):.1f}). Neither saturated anything on its own: "
        f"during our run our processes and kinesalite together kept {used:.2f} of the 2 "
        "cores busy (kinesalite alone would need 1.0 to be the bottleneck), the other "
        "jobs on the machine took the rest. When CPU is what every runnable process "
        "competes for, throughput follows CPU per record: the plain reader needs "
        f"{plain_total / ours_total:.2f} of our CPU per record, and the measured ratio is "
        f"{result['ratio']:.2f}. On an idle machine the gap narrows only as far as our "
        "2 task slots and per-batch steps allow; the way to close it is to cut CPU."
        if ours_total
        else "No CPU accounting for our run."
    )
    if ingest_profile is not None:
        text += (
            " Where our Python CPU goes (warm run, py-spy over every Python process of "
            "the driver tree; shares of samples, overlapping): PySpark's `gc.collect()` "
            f"after every task in each reused worker {_pct(gc)}; module imports in newly "
            f"started Python workers and runners {_pct(imports)}; GetRecords calls "
            f"{_pct(get_records)}, of which the per-record timestamp parsing {_pct(ts)}; "
            f"building a Kinesis client in a new worker {_pct(client)}; the sink's "
            f"per-shard position tracking {_pct(_bucket(ingest_profile, 'sink position'))}; "
            "Arrow conversion "
            f"{_pct(_bucket(ingest_profile, 'records_to_arrow'))}; Parquet writing "
            f"{_pct(_bucket(ingest_profile, 'Parquet writing'))}; the driver-side commit "
            f"{_pct(_bucket(ingest_profile, 'sink commit'))}."
        )
    text += (
        " Structure adds latency on top: `local[2]` runs 2 tasks at a time, "
        "each task reads and writes in two Python workers plus the JVM hand-over, and "
        "every run pays query start, planning and a commit."
    )
    return text + _profile_note(ingest_profile)


def _ingest(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("ingest_vs_read_ceiling")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    return [
        f"### 1. Ingest vs read ceiling: ratio {result['ratio']:.2f} (target >= 0.8)",
        "",
        _cpu_paragraph(result, _profile(results_dir, "ingest")),
        "",
    ]


def _end_to_end(results: dict[str, Any], results_dir: Path) -> list[str]:
    """Target 2 (a new process), from benchmark 1's ratios and benchmark 12's timeline."""
    ceiling = results.get("ingest_vs_read_ceiling") or {}
    python_start = results.get("python_start") or {}
    timeline = python_start.get("timeline")
    whole = ceiling.get("ratio_end_to_end_process")
    if whole is None or whole >= 0.5 or not timeline:
        return []
    processes = timeline["processes"]
    jvm = [at for at, role in processes if role.startswith("driver JVM")]
    spark_python = [at for at, role in processes if role.startswith("pyspark")]
    if not jvm or not spark_python:
        return []
    stages: list[str] = []
    for _, role in processes:  # in the order they first appeared
        short = role.split()[-1].rsplit(".", 1)[-1]
        if role.startswith(("pyspark", "kinesis_lake")) and short not in stages:
            stages.append(short)
    records = python_start["records"]
    warm_rate = ceiling["ours"]["runs"]["warm"]["rows_per_second"]
    return [
        f"### 1-2. End to end, a new process: {whole:.2f} of the read ceiling (target >= 0.5)",
        "",
        f"**Python processes started one after another.** A new `kinesis-lake ingest` of "
        f"{records:,} records (benchmark 12's timeline) took {timeline['seconds']:.1f} s: "
        f"the command's own start and imports {jvm[0]:.1f} s, the driver JVM "
        f"{spark_python[0] - jvm[0]:.1f} s until Spark's first Python process, then "
        f"{timeline['seconds'] - spark_python[0]:.1f} s until the command exited, in which "
        f"Spark started {len(stages)} kinds of Python process in turn, each waiting for the "
        f"one before: {', '.join(stages)}. At benchmark 1's warm rate those records are "
        f"{records / warm_rate:.2f} s of work. PySpark 4.3 starts its data-source planners "
        "and runners through the stock `pyspark.daemon` (`PythonPlannerRunner` asks for no "
        "daemon module), so they cannot fork from the project's preloaded worker daemon; "
        "each imports PySpark, unpickles the source or sink and imports what it needs. "
        "Compiling PySpark's archive took a share off each (benchmark 12: ratio "
        f"{python_start['ratio']:.2f}). What removes the sequence is a Spark that stays up "
        "with its query: lingering runs (benchmark 10). Over Spark Connect without "
        "lingering the ratio is "
        f"{_ratio_text(ceiling.get('ratio_end_to_end_connect_process'))}: the JVM is warm, "
        "and since `connect-server` turned artifact isolation off every run forks these "
        "from daemons the server already has (FINDINGS 18), but each fork still imports "
        "what the source or sink needs, and the streaming source runner starts anew.",
        "",
    ]


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _hand_written(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("ingest_vs_hand_written")
    if not result or "error" in result:
        return []
    lines = []
    if result.get("verdict") == "MISSED":
        theirs = result["hand_written"]
        lines += [
            f"### 2. Ingest vs hand-written: ratio {result['ratio']:.2f} (target >= 2.0)",
            "",
            f"The hand-written loop does one thing per record: parse the response and hand "
            f"it to `table.append` ({theirs['appends']} appends, "
            f"{theirs['append_seconds']:.1f} s of {theirs['seconds']:.1f} s in pyiceberg). "
            "Ours does the same work plus the Spark hand-overs, so it cannot be faster on "
            "2 cores until the per-task overheads named under benchmark 1 are gone; its "
            "advantages (exactly-once, one atomic commit per micro-batch, restartability, "
            "parallel reads across executors) do not show in a single-process backlog "
            "drain on 2 cores.",
            "",
        ]
    if result.get("files_verdict") == "MISSED":
        ours, theirs = result["ours"]["table"], result["hand_written"]["table"]
        lines += [
            f"**Files: {ours['data_files']} vs {theirs['data_files']} "
            f"(ratio {result['files_ratio']:.2f}, target <= 0.1).** The hand-written loop "
            "writes one file per GetRecords response; draining a backlog those are already "
            f"large ({result['hand_written']['get_records_limit']:,} records), so it wrote "
            f"{theirs['data_files']}. Ours writes one file per shard task per micro-batch "
            f"(per partition value): {result['ours']['batches_with_rows']} micro-batch(es) "
            f"x 4 shards = {ours['data_files']} files, whatever the batch size. So the "
            "ratio is 4 x micro-batches / responses: it reaches 0.1 only when a "
            "micro-batch spans 40+ responses (e.g. the full-mode 2M backlog, 500k "
            "records per shard in batches of 100k per shard). Closing it for small "
            "backlogs takes fewer writer tasks than shards (coalescing before the sink, "
            "at the cost of write parallelism) or the existing `maintenance.compact`. "
            f"Snapshots: {ours['snapshots']} vs {theirs['snapshots']}, one commit per "
            "micro-batch against one per response.",
            "",
        ]
    return lines


def _freshness(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("freshness")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    run = result["runs"][0]
    cpu = run.get("cpu_s_per_batch", {})
    own = sum(v for k, v in cpu.items() if k in ("python", "jvm"))
    profile = _profile(results_dir, "freshness")
    text = (
        f"With a {run['trigger']} trigger, a micro-batch took {run['batch_duration_s']['p50']:.1f} "
        f"s (median) and {own:.2f} CPU-seconds of our own processes (Python "
        f"{cpu.get('python', 0):.2f}, JVM {cpu.get('jvm', 0):.2f}) plus "
        f"{cpu.get('kinesalite', 0):.2f} in kinesalite, for about "
        f"{run['rate_records_per_second'] * max(1.0, run['batch_duration_s']['p50'] or 1):,.0f}"
        " records. Almost all of it is per-batch, not per-record, cost: on 2 cores a "
        f"batch cannot take less than ~{own / 2:.1f} s, and latency is that plus the "
        "wait for the next trigger plus one table poll."
    )
    if profile is not None:
        text += (
            f" py-spy over the steady-state window: PySpark's `gc.collect()` after every "
            f"task {_pct(_gc_share(profile))} of all Python samples (each worker that "
            "imported kinesis-lake, pyiceberg and boto3 holds ~200k tracked objects; one "
            "full collection costs 0.1-0.4 s); building a Kinesis client in a new worker "
            f"{_pct(_bucket(profile, 'Kinesis client'))}; GetRecords calls "
            f"{_pct(_bucket(profile, 'GetRecords request'))} (botocore timestamp parsing "
            f"{_pct(_bucket(profile, 'botocore timestamp'))}); Parquet writing "
            f"{_pct(_bucket(profile, 'Parquet writing'))}; the driver-side commit "
            f"{_pct(_bucket(profile, 'sink commit'))}; source planning "
            f"{_pct(_bucket(profile, 'source planning'))}."
        )
    return [
        f"### 3. Freshness: p99 {result['p99_s']:.2f} s ({result['target']})",
        "",
        text + _profile_note(profile),
        "",
    ]


def _derive(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("derive_refresh")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    reads = result["rows_read_by_step"]
    grows = [
        f"`{step}` {reads['small'].get(step, 0):,} -> {reads['large'].get(step, 0):,} rows"
        for step in reads.get("large", {})
        if reads["large"].get(step, 0) > 2 * max(1, reads["small"].get(step, 0))
    ]
    text = (
        f"Each refresh read the same {result['new_rows_per_refresh']:,} new raw rows, but "
        + (
            "these steps read rows in proportion to the table: " + "; ".join(grows) + ". "
            if grows
            else "no step read more rows with the larger table; the difference is time. "
        )
        + "`_written_in_days` (derive.py, the duplicate check) scans the key column of "
        "each day partition the new events fall in, so on a busy day its cost grows "
        "with the day's volume, not with the new rows."
    )
    return [
        f"### 4. Derived refresh: ratio {result['ratio']:.2f} (target <= 1.2)",
        "",
        text + _profile_note(_profile(results_dir, "derive")),
        "",
    ]


def _commits(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("commit_cost")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    by_snapshots: dict[int, list[float]] = {}
    for sample in result["samples"]:
        bucket = sample["snapshots"] // 25 * 25
        by_snapshots.setdefault(bucket, []).append(sample["commit_s"])
    rows = ", ".join(
        f"{bucket}-{bucket + 24} snapshots: {median(values) * 1000:.0f} ms"
        for bucket, values in sorted(by_snapshots.items())
    )
    profile = _profile(results_dir, "commits")
    text = (
        f"Commit latency follows the number of snapshots the table keeps, not the number "
        f"of commits made: median commit_files by retained snapshots: {rows}. Routine "
        f"expiry every {result['expire_every']} commits keeps `retain_last="
        f"{result['retain_last']}` (the raw table's `history.expire.min-snapshots-to-keep`), "
        f"so between expiries a commit works on {result['retain_last']}-"
        f"{result['retain_last'] + result['expire_every']} snapshots while the first "
        "ones worked on 0-20."
    )
    if profile is not None:
        text += (
            " py-spy of the commit loop: pyiceberg's `Transaction.table_metadata` takes "
            f"{_pct(_bucket(profile, 'pyiceberg Transaction.table_metadata'))} of the "
            f"samples (`commit_files` on its own thread: {_pct(_bucket(profile, 'commit_files'))}; "
            "pyiceberg merges manifests on threads of its own)."
        )
    text += (
        " Each rebuild of the metadata deep-copies every retained snapshot; commits now "
        "rebuild it once per staged change (`kinesis_lake/iceberg/transaction.py`), so "
        "what still grows is that one copy, the catalog's validation and the metadata "
        "JSON written and read per commit, all proportional to the retained snapshots."
    )
    text += " " + _merges(result["samples"], profile)
    return [
        f"### 5. Commit cost: ratio {result['ratio']:.2f} ({result['target']})",
        "",
        text + _profile_note(profile),
        "",
    ]


def _merges(samples: list[dict[str, Any]], profile: dict[str, Any] | None) -> str:
    """What the medians leave out: the commits that merged manifests (the count drops)."""
    merges = [s for prev, s in pairwise(samples) if s["manifests"] < prev["manifests"]]
    if not merges:
        return ""
    total = sum(s["commit_s"] for s in samples)
    slowest = max(merges, key=lambda s: s["commit_s"])
    text = (
        f"The tail grows where the medians do not: {len(merges)} of the {len(samples):,} "
        f"commits merged manifests and took {sum(s['commit_s'] for s in merges):.0f} s of "
        f"the {total:.0f} s spent in commit_files. A merge rewrites every entry of the "
        "manifests it merges, and the raw table's merged manifest is merged again every "
        "ninth commit until it passes `commit.manifest.target-size-bytes`, so a merge "
        f"costs more as files accumulate (the slowest, commit {slowest['commit']}: "
        f"{slowest['commit_s']:.2f} s)."
    )
    if profile is not None:
        share = _pct(_bucket(profile, "manifest merges"))
        text += f" In the profile, manifest merges take {share} of the samples (their threads)."
    return text


def _memory(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("memory")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    large = result["large"]
    return [
        f"### 6. Memory: ratio {result['ratio']:.2f} (target <= 1.3)",
        "",
        f"The larger backlog ran {large['micro_batches']} micro-batches of at most "
        "max_records_per_shard records per shard; peak memory per kind: "
        + ", ".join(f"{k} {v:,.0f} MiB" for k, v in large["peak_rss_by_kind_mb"].items())
        + ". What grows is the JVM heap (it is sized lazily up to -Xmx) and the Arrow "
        "buffers of the in-flight batch.",
        "",
    ]


def _scale(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("scale_out")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    parts = []
    for label in ("one", "two"):
        warm = result["runs"][label]["runs"]["warm"]
        cpu = warm.get("cpu_per_wall_s", {})
        busy = sum(v for k, v in cpu.items() if k in ("python", "jvm", "kinesalite"))
        parts.append(
            f"{label} executor{'s' if label == 'two' else ''}: "
            f"{busy:.2f} busy cores (Python {cpu.get('python', 0):.2f}, JVM "
            f"{cpu.get('jvm', 0):.2f}, kinesalite {cpu.get('kinesalite', 0):.2f})"
        )
    return [
        f"### 7. Scale-out: ratio {result['ratio']:.2f} (target >= 1.6)",
        "",
        f"This machine has {result.get('cores')} cores for the driver JVM, every executor "
        "JVM, every Python worker, kinesalite (one Node thread serving every GetRecords) "
        "and the other jobs on the machine. A second executor adds task slots, not CPU: "
        f"{'; '.join(parts)}. The {result['ratio']:.2f}x it did bring comes from "
        "overlapping waits (HTTP round trips to kinesalite, the 0.2 s spacing between "
        "GetRecords calls of a shard, JVM-Python hand-overs) across more concurrent "
        "tasks, not from more CPU. With the CPU already shared, 1.6x is out of reach here; the "
        "measurement needs executors on separate cores or hosts (and a real Kinesis "
        "endpoint, whose read capacity grows with shards) to say anything about "
        "scale-out. What it does show: the pipeline ran unchanged on two executor JVMs "
        "(no driver-side state), with the same rows committed.",
        "",
    ]


def _dagster_mode(results: dict[str, Any], results_dir: Path) -> list[str]:
    result = results.get("dagster_mode")
    if not result or "error" in result or result.get("verdict") != "MISSED":
        return []
    parts = []
    for label, v in result["variants"].items():
        steps = ", ".join(f"`{k}` {t:.1f} s" for k, t in v["step_seconds_median"].items())
        parts.append(
            f"**{label}**: a record waits for the sensor's next tick (every "
            f"{v['sensor_interval_s']} s, half that on average), then for the run the tick "
            f"launched: queued {v['run_queued_s_median'] or 0:.1f} s (median), "
            f"{v['run_start_to_first_step_s_median'] or 0:.1f} s from the run's start to its "
            f"first step (a new process loading the definitions), then the steps ({steps}); "
            f"the whole run {v['run_duration_s_median'] or 0:.1f} s. A record put while a run "
            "is in progress waits for the next run."
        )
    return [
        f"### 10. Dagster mode: p50 {result['p50_s']:.1f} s, p99 {result['p99_s']:.1f} s "
        f"({result['target']})",
        "",
        *(part + "\n" for part in parts),
        "What is left with Spark Connect is per run, not per record: Dagster's queue, "
        "its new run process loading the definitions, and the query's own start-up in "
        "the server (in a probe of 500 records, creating the writer and committing took "
        "about 3 and 4 s over Connect against under 1 s in a warm local JVM). For latency "
        "in seconds, run ingestion continuously (`kinesis-lake stream`, benchmark 3).",
        "",
    ]


def analyse(results: dict[str, Any], results_dir: Path) -> str:
    """Markdown paragraphs for every missed target, from the results and profiles."""
    lines: list[str] = []
    sections = (
        _ingest,
        _end_to_end,
        _hand_written,
        _freshness,
        _derive,
        _commits,
        _memory,
        _scale,
        _dagster_mode,
    )
    for section in sections:
        try:
            lines += section(results, results_dir)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            lines += [f"(analysis of {section.__name__} failed: {error!r})", ""]
    return "\n".join(lines)
