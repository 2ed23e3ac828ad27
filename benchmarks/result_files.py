"""``results/<name>.json``: one benchmark's numbers with the environment they came from.

A rewritten file keeps the headline of the one it replaces (``previous``), so the report
can show each new figure beside the last one without digging in git history.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.context import BenchContext


def write_result(ctx: BenchContext, name: str, result: dict[str, Any]) -> Path:
    """``results/<name>.json``: the benchmark's numbers plus the environment they came from.

    The replaced file's headline goes into ``result`` too (as ``previous``), so the report
    of the run that measured it shows it, not only later reports read from the file."""
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.results_dir / f"{name}.json"
    if path.exists():
        result["previous"] = _previous(name, json.loads(path.read_text()))
    payload = {"benchmark": name, "environment": ctx.environment, **result}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=_json_default) + "\n")
    return path


def headline(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """The figures benchmark ``name``'s ``result`` is judged by, by label; a label ending
    in " s" holds seconds, a list one figure per run.

    One place says what a benchmark's headline is: the report's Summary renders it for
    the current result, and ``write_result`` keeps it for the result a new one replaces.
    Keys that older result files lack are left out, not guessed.
    """
    if "error" in result:
        return {"error": " ".join(result["error"][:80].split())}
    if name == "freshness":
        figures: dict[str, Any] = {f"p{p} s": result[f"p{p}_s"] for p in (50, 95, 99)}
        if "headline_runs" in result:  # measured three times since issue 34
            figures["p99 each run s"] = [run["p99_s"] for run in result["headline_runs"]]
        return {**figures, "trigger": result["trigger"]}
    if name == "dagster_mode":
        return {
            f"{label} {p} s": variant[f"{p}_s"]
            for label, variant in result["variants"].items()
            for p in ("p50", "p99")
        }
    if name == "dagster_burst":
        return {
            f"{kind} {p} s": result[f"{kind}_latency_s"][p]
            for kind in ("raw", "derived")
            for p in ("p50", "p99")
        }
    if name == "fresh_read":
        return {
            "put -> visible p50 s": result["latency_s"]["p50"],
            "put -> visible p99 s": result["latency_s"]["p99"],
            "query fresh/snapshot": result["query_cost_ratio"],
        }
    if name == "decode_cost":
        figures = {"Avro/JSON records/s": result["ratio"], "zlib Avro/JSON": result["ratio_zlib"]}
        if "ratio_protobuf" in result:  # measured since issue 35's Protobuf support
            figures["Protobuf/JSON"] = result["ratio_protobuf"]
            figures["Protobuf behind the header/JSON"] = result["ratio_protobuf_registry"]
        return figures
    figures = {"ratio": result.get("ratio")}
    if name == "ingest_vs_hand_written":
        ours, theirs = result["ours"]["table"], result["hand_written"]["table"]
        figures |= {
            "data files ours": ours["data_files"],
            "data files hand-written": theirs["data_files"],
            "files ratio": result.get("files_ratio"),
            "files verdict": result.get("files_verdict"),
            "snapshots ours": ours["snapshots"],
            "snapshots hand-written": theirs["snapshots"],
        }
    if "end_to_end_verdict" in result:
        figures |= {
            "end to end (whole process)": result.get(
                "ratio_end_to_end_process", result.get("ratio_including_jvm_start")
            ),
            "over Spark Connect": result.get(
                "ratio_end_to_end_connect_process", result.get("ratio_over_connect")
            ),
            "end to end verdict": result["end_to_end_verdict"],
        }
    if name == "many_shards":
        figures |= {f"driver ms ({shards})": ms for shards, ms in result["driver_ms"].items()}
        figures |= {
            f"data files per commit ({shards})": run["data_files_per_commit"]
            for shards, run in result["runs"].items()
        }
    return figures


def _previous(name: str, old: dict[str, Any]) -> dict[str, Any]:
    """What the report shows of the result being replaced: its headline, verdict and the
    run it came from; its own ``previous`` is dropped (one step back is enough)."""
    try:
        figures = headline(name, old)
    except (KeyError, TypeError, IndexError) as error:
        # A result file of an older shape must not cost the new measurement.
        figures = {"not understood": repr(error)}
    environment = old.get("environment") or {}
    return {
        "headline": figures,
        "verdict": old.get("verdict"),
        "timestamp": environment.get("timestamp"),
        "git_commit": environment.get("git_commit"),
    }


def _json_default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")
