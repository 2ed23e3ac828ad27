"""The report's PNG plots, drawn from the benchmark results with matplotlib.

Apart from the Markdown so the report's text can be read and changed without the
plotting, and matplotlib (with its file-only backend) is set up in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from benchmarks.report_sections import _fmt, _run_label


def _save(fig: Any, out: Path) -> str:
    """Write ``fig`` to ``out`` as every plot is written, and close it: pyplot keeps open
    figures alive. Returns the name REPORT.md links."""
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out.name


def _plot_throughput(results: dict[str, Any], out: Path) -> str | None:
    ceiling = results.get("ingest_vs_read_ceiling", {})
    hand = results.get("ingest_vs_hand_written", {})
    scale = results.get("scale_out", {})
    bars: list[tuple[str, float]] = []
    for reader in ceiling.get("plain_readers", []):
        bars.append((f"plain reader\n({reader['workers']})", reader["records_per_second"]))
    warm = ceiling.get("ours", {}).get("runs", {}).get("warm")
    if warm:
        bars.append(("ours local[2]\nwarm", warm["rows_per_second"]))
    if ceiling.get("end_to_end"):
        bars.append(
            ("ours local[2]\nend to end", ceiling["end_to_end"]["run_ingestion_rows_per_second"])
        )
    if "hand_written" in hand:
        bars.append(("hand-written\nGetRecords+append", hand["hand_written"]["rows_per_second"]))
    for label, value in (scale.get("rows_per_second") or {}).items():
        bars.append((f"ours local-cluster\n{label.replace('_', ' ')} warm", value))
    if not bars:
        return None
    # Two plain-reader runs per kind (before and after ours): keep both, they show noise.
    fig, axis = plt.subplots(figsize=(11, 4.5))
    labels = [b[0] for b in bars]
    colors = [
        "#888888" if "plain" in lbl else "#d62728" if "hand" in lbl else "#1f77b4" for lbl in labels
    ]
    axis.bar(range(len(bars)), [b[1] for b in bars], color=colors)
    axis.set_xticks(range(len(bars)), labels, fontsize=7)
    axis.set_ylabel("records/s")
    axis.set_title(f"Ingest throughput, {_fmt(ceiling.get('records'))} records, 4 shards")
    return _save(fig, out)


def _plot_freshness(result: dict[str, Any], out: Path) -> str | None:
    runs = [r for r in result.get("runs", []) if r.get("latencies_for_plot")]
    if not runs:
        return None
    fig, axis = plt.subplots(figsize=(7, 4))
    for run in runs:
        values = sorted(run["latencies_for_plot"])
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        axis.plot(values, fractions, label=f"trigger {_run_label(run)}")
    axis.axvline(1.0, color="red", linestyle="--", linewidth=1, label="target p99 1 s")
    axis.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    axis.set_xlabel("send -> visible in a table scan (s)")
    axis.set_ylabel("fraction of records")
    axis.set_title("Freshness latency CDF (steady state)")
    axis.legend()
    return _save(fig, out)


def _plot_commits(result: dict[str, Any], out: Path) -> str | None:
    samples = result.get("samples")
    if not samples:
        return None
    fig, axis = plt.subplots(figsize=(9, 4))
    x = [s["commit"] for s in samples]
    axis.plot(x, [s["commit_s"] * 1000 for s in samples], ".", ms=3, label="commit_files")
    axis.plot(
        x,
        [(s["load_s"] + s["positions_s"] + s["commit_s"]) * 1000 for s in samples],
        ".",
        ms=2,
        alpha=0.5,
        label="sink path (load + positions + commit)",
    )
    for expiry in result.get("expiries", []):
        axis.axvline(expiry["after_commit"], color="grey", linewidth=0.5, alpha=0.5)
    axis.set_xlabel("commit number (grey lines: snapshot expiry)")
    axis.set_ylabel("latency (ms)")
    twin = axis.twinx()
    twin.plot(x, [s["snapshots"] for s in samples], color="green", linewidth=1)
    twin.plot(x, [s["manifests"] for s in samples], color="orange", linewidth=1)
    twin.set_ylabel("snapshots (green), manifests (orange)")
    axis.legend(loc="upper left", fontsize=8)
    axis.set_title("Commit latency over a streaming writer's life")
    return _save(fig, out)


def _plot_memory(result: dict[str, Any], out: Path) -> str | None:
    if "small" not in result or "large" not in result:
        return None
    fig, axis = plt.subplots(figsize=(8, 4))
    for label, color in (("small", "tab:blue"), ("large", "tab:orange")):
        samples = result[label]["samples"]
        records = _fmt(result[label]["records"])
        axis.plot(
            [t for t, _ in samples],
            [v for _, v in samples],
            color=color,
            label=f"{records} records, RSS sum",
        )
        pss = result[label].get("pss_samples") or []
        axis.plot(
            [t for t, _ in pss],
            [v for _, v in pss],
            color=color,
            linestyle="--",
            label=f"{records} records, PSS sum",
        )
    axis.set_xlabel("seconds since `kinesis-lake ingest` started")
    axis.set_ylabel("memory of the process tree (MiB)")
    axis.set_title("Ingestion driver memory (Python + JVM + workers)")
    axis.legend()
    return _save(fig, out)


def _plot_derive(result: dict[str, Any], out: Path) -> str | None:
    refreshes = result.get("refreshes")
    if not refreshes:
        return None
    fig, axis = plt.subplots(figsize=(7, 4))
    for offset, label in enumerate(("small", "large")):
        values = [r["seconds"] for r in refreshes if r["table"] == label]
        axis.bar(
            [offset + 0.8 * i / max(1, len(values)) for i in range(len(values))],
            values,
            width=0.7 / max(1, len(values)),
            label=f"{label}: {_fmt(result['raw_rows'][label])} raw rows",
        )
    axis.set_xticks([0.3, 1.3], ["small", "large"])
    axis.set_ylabel("refresh_downstream seconds (per round)")
    axis.set_title(f"Refresh after {_fmt(result.get('new_rows_per_refresh'))} new raw rows")
    axis.legend(fontsize=8)
    return _save(fig, out)
