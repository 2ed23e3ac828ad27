"""REPORT.md and PNG plots from the benchmark results of one run.

The report states each number next to its target, how it was measured, and, for every
missed target, the measured evidence of what limits it (CPU per process kind, Spark's
per-phase batch durations, rows read per derive step, commit-time breakdown), plus the
py-spy profile summaries in ``results/profile_*.json`` when ``benchmarks.profile`` has
been run. This module puts the report together; each benchmark's section is written in
``report_sections`` and the plots are drawn in ``report_plots``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.report_plots import (
    _plot_commits,
    _plot_derive,
    _plot_freshness,
    _plot_memory,
    _plot_throughput,
)
from benchmarks.report_sections import _SECTIONS, _fmt
from benchmarks.result_files import headline
from benchmarks.sandbox import RESULTS_DIR

# Hand-written prose next to the generated REPORT.md; see ``_findings``.
FINDINGS_PATH = RESULTS_DIR / "FINDINGS.md"

ORDER = (
    ("ingest_vs_read_ceiling", "1. Ingest vs read ceiling"),
    ("ingest_vs_hand_written", "2. Ingest vs hand-written consumer"),
    ("freshness", "3. Freshness (continuous mode)"),
    ("derive_refresh", "4. Incremental derived refresh"),
    ("commit_cost", "5. Commit cost over time"),
    ("memory", "6. Driver memory"),
    ("scale_out", "7. Scale-out"),
    ("upsert_refresh", "8. Upsert refresh"),
    ("many_shards", "9. Many shards"),
    ("dagster_mode", "10. Dagster mode latency"),
    ("jvm_start", "11. Driver JVM start"),
    ("python_start", "12. Python start: compiled PySpark archive"),
    ("dagster_burst", "13. Burst in the Dagster mode"),
    ("decode_cost", "14. Decode cost: Avro and Protobuf vs JSON"),
    ("fresh_read", "15. Fresh read: put -> visible through --fresh"),
)


def _summary_rows(results: dict[str, Any], environment: dict[str, Any]) -> list[str]:
    """One row per benchmark, its headline beside the previous result's; "run at" is when
    its invocation started."""
    rows = [
        "| # | benchmark | measured | target | verdict | previous | run at (UTC), took |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, title in ORDER:
        number, _, title = title.partition(". ")
        result = results.get(name)
        if result is None:
            rows.append(f"| {number} | {title} | not run | | | | |")
            continue
        target = result.get("target") or ""
        if "end_to_end_target" in result:
            target += f"; end to end {result['end_to_end_target']}"
        when = (result.get("environment") or environment).get("timestamp", "")[11:19]
        rows.append(
            f"| {number} | {title} | {_figures(headline(name, result))} | {target} | "
            f"{result.get('verdict')} | {_previous(result)} | {when}, "
            f"{_fmt(result.get('duration_s'), 0)} s |"
        )
    return rows


def _figures(figures: dict[str, Any]) -> str:
    """``headline``'s figures as "label value"; seconds get their unit, runs a slash."""
    parts = []
    for label, value in figures.items():
        text = " / ".join(_fmt(v) for v in (value if isinstance(value, list) else [value]))
        if label.endswith(" s"):
            label, text = label.removesuffix(" s"), f"{text} s"
        parts.append(f"{label} {text}")
    return "; ".join(parts)


def _previous(result: dict[str, Any]) -> str:
    """The replaced result's headline, verdict, day and commit (``write_result`` keeps
    them); "none" for a first result or one written before results kept them."""
    previous = result.get("previous")
    if not previous:
        return "none"
    return (
        f"{_figures(previous['headline'])} ({previous['verdict']}, "
        f"{(previous.get('timestamp') or '')[:10]}, {(previous.get('git_commit') or '')[:7]})"
    )


_PROFILE_ORDER = ("ingest", "freshness", "derive", "commits")
_PROFILE_ROWS = 12


def _profiles(results_dir: Path) -> list[str]:
    lines = []

    def order(path: Path) -> int:
        name = path.stem.removeprefix("profile_")
        return _PROFILE_ORDER.index(name) if name in _PROFILE_ORDER else len(_PROFILE_ORDER)

    paths = sorted(results_dir.glob("profile_*.json"), key=order)
    for path in paths:
        profile = json.loads(path.read_text())
        lines += [
            f"### Profile: {profile['title']}",
            "",
            f"{profile['how']} ({profile['environment']['timestamp']}, "
            f"{profile['samples']:,} samples).",
            "",
        ]
        if profile.get("buckets"):
            lines += [
                "Named costs (share of samples whose stack passes through them; a sample "
                "can count in more than one):",
                "",
                "| share | cost |",
                "|---|---|",
                *(f"| {share:.1%} | {name} |" for name, share in profile["buckets"].items()),
                "",
            ]
        lines += [
            "Self time (the innermost frame):",
            "",
            "| share of samples | function (file:line) |",
            "|---|---|",
        ]
        for row in profile["top_self"][:_PROFILE_ROWS]:
            lines.append(f"| {row['share']:.1%} | `{row['frame']}` |")
        # Process entry points (every sample of a process is under them) say nothing.
        inclusive = [
            row
            for row in profile.get("top_inclusive", [])
            if "<module> (daemon.py" not in row["frame"] and "benchmarks/" not in row["frame"]
        ]
        if inclusive:
            lines += ["", "Inclusive (the frame or anything it calls):", ""]
            lines += ["| share | function |", "|---|---|"]
            for row in inclusive[:_PROFILE_ROWS]:
                lines.append(f"| {row['share']:.1%} | `{row['frame']}` |")
        if profile.get("by_process"):
            lines += [
                "",
                "Samples by process: "
                + ", ".join(f"{r['frame']} {r['share']:.0%}" for r in profile["by_process"]),
            ]
        lines.append("")
    return lines


def _runs_note(results: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Say so when the results on disk come from more than one invocation.

    This invocation's own results carry no environment of their own: it is ``current``.
    """
    starts = sorted(
        {current["timestamp"]}
        | {
            r["environment"]["timestamp"]
            for r in results.values()
            if isinstance(r, dict) and "timestamp" in (r.get("environment") or {})
        }
    )
    if len(starts) <= 1:
        return []
    return [
        f"These results come from {len(starts)} invocations ({', '.join(starts)}); the "
        "Summary's last column says which benchmark ran when. The total above is the sum "
        "of the benchmarks' own durations.",
        "",
    ]


def _findings(path: Path = FINDINGS_PATH) -> list[str]:
    """``FINDINGS.md`` as the report's last prose section, its title one level down.

    The findings are written by hand (they name code and fixes, which no result can), so
    they are read from the committed file whatever results directory is reported on.
    """
    title, _, body = path.read_text().partition("\n")
    if not title.startswith("# "):
        raise ValueError(f"{path} must open with a '# ' title, not {title!r}")
    return ["#" + title, "", body.strip(), ""]


def write_report(
    results_dir: Path,
    environment: dict[str, Any],
    results: dict[str, Any],
    *,
    total_seconds: float,
    analysis: str | None = None,
) -> Path:
    """Write REPORT.md (and its plots) for ``results``; returns its path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    # Results of benchmarks not run this time are read back from their JSON, so a
    # partial run (--only) still produces a complete report.
    merged = dict(results)
    for name, _ in ORDER:
        path = results_dir / f"{name}.json"
        if name not in merged and path.exists():
            merged[name] = json.loads(path.read_text())
    plots = {
        "throughput": _plot_throughput(merged, results_dir / "ingest_throughput.png"),
        "freshness": _plot_freshness(
            merged.get("freshness", {}), results_dir / "freshness_latency.png"
        ),
        "commits": _plot_commits(merged.get("commit_cost", {}), results_dir / "commit_cost.png"),
        "memory": _plot_memory(merged.get("memory", {}), results_dir / "memory_rss.png"),
        "derive": _plot_derive(
            merged.get("derive_refresh", {}), results_dir / "derive_refresh.png"
        ),
    }
    env = environment
    lines = [
        "# kinesis-lake benchmarks",
        "",
        f"Mode **{env['mode']}** (scale {env['scale']}), {env['timestamp']}, "
        f"{total_seconds:.0f} s in total. Machine: {env['cores_logical']} cores, "
        f"{env['memory_total_mb']:,} MiB; load average at start "
        f"{env['load_average_at_start']} (other jobs share this machine: compare ratios, "
        "not absolute numbers). Python {python}, {java}, pyspark {pyspark}, pyiceberg "
        "{pyiceberg}, pyarrow {pyarrow}, kinesalite {kinesalite} (node {node}), commit "
        "{git_commit}.".format(**env),
        "",
        "Regenerate: `make bench` (quick) or `make bench-full`. Raw numbers: "
        "`benchmarks/results/<name>.json`.",
        "",
        *_runs_note(merged, env),
        "## Summary",
        "",
        *_summary_rows(merged, environment),
        "",
        "Start-up accounting: JVM (and local-cluster executor) start-up is reported apart "
        "(`session_start_s`) and excluded from steady-state numbers. The first micro-batch "
        "in a JVM pays Python-worker start-up (imports of pyspark, pyarrow, pyiceberg, "
        "boto3 in every worker): each Spark JVM first ingests a small warm-up stream of "
        "its own, and the measured run after it (its own query: start, planning, reads, "
        'writes, commits, stop, all timed) is the steady state ("warm"). End to end is '
        "measured separately with `kinesis-lake ingest` in a new process on the same "
        "backlog (benchmark 1's end-to-end rows, also benchmark 6's large run). Derive "
        "times refreshes only after an untimed first refresh per table; freshness starts "
        "the producer after the query's first (empty) micro-batch and excludes a warm-up "
        "period, both reported apart.",
        "",
    ]
    if plots["throughput"]:
        lines += [f"![throughput]({plots['throughput']})", ""]
    plot_for = {
        "freshness": plots["freshness"],
        "commit_cost": plots["commits"],
        "memory": plots["memory"],
        "derive_refresh": plots["derive"],
    }
    for name, title in ORDER:
        result = merged.get(name)
        lines += [f"## {title}", ""]
        if result is None:
            lines += ["Not run.", ""]
            continue
        if "error" in result:
            lines += ["Failed:", "", "```", result["error"], "```", ""]
            continue
        try:
            lines += _SECTIONS[name](result)
        except (KeyError, TypeError, IndexError) as error:
            lines += [f"(section could not be rendered: {error!r})", ""]
        if plot_for.get(name):
            lines += [f"![{name}]({plot_for[name]})", ""]
    from benchmarks.analysis import analyse

    analysis = analysis if analysis is not None else analyse(merged, results_dir)
    if analysis.strip():
        lines += ["## What limits the missed targets", "", analysis.strip(), ""]
    lines += _findings()
    profile_lines = _profiles(results_dir)
    if profile_lines:
        lines += ["## Profiles", "", *profile_lines]
    path = results_dir / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path
