"""Run the kinesis-lake benchmarks and write results, plots and REPORT.md.

    python -m benchmarks.run --quick            # make bench: about half an hour on 2 cores
    python -m benchmarks.run --full             # make bench-full
    python -m benchmarks.run --quick --scale 0.05 --only commit_cost,freshness

One kinesalite endpoint on 127.0.0.1 serves every benchmark; streams are produced once
and shared (benchmarks 1, 2, 6 and 7 read the same backlog). Each benchmark writes
``benchmarks/results/<name>.json``; a failing benchmark is recorded as such and the
others still run. Scratch data (warehouses, checkpoints, Spark logs) lives under
``benchmarks/results/tmp/`` (git-ignored) and is deleted afterwards unless a benchmark
failed or ``--keep-work`` is given.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import environment_info, load_now
from benchmarks.result_files import write_result
from benchmarks.sandbox import RESULTS_DIR, configure_process_env, new_work_dir
from benchmarks.sizes import Sizes

# Run order: the ingest measurements first and close together (they are compared with
# each other); then the other users of the shared local[2] Spark worker, which is stopped
# before the local clusters start. The report lists them by benchmark number.
BENCHMARKS = (
    "ingest_ceiling",
    "hand_written",
    "freshness",
    "derive_refresh",
    "upsert_refresh",
    "many_shards",
    "scale_out",
    "memory",
    "commit_cost",
    "dagster_mode",
    "dagster_burst",
    "jvm_start",
    "python_start",
    "decode_cost",
    "fresh_read",
)


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _endpoint_pid() -> int | None:
    """The kinesalite server we just started (our child named node), for CPU accounting."""
    import psutil

    for child in psutil.Process().children():
        try:
            if child.name() == "node":
                return child.pid
        except psutil.Error:
            continue
    return None


def _endpoint_alive(ctx: BenchContext) -> bool:
    import psutil

    try:
        return (
            ctx.endpoint_pid is not None
            and psutil.Process(ctx.endpoint_pid).status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def _ensure_endpoint(ctx: BenchContext, endpoints: list[Any]) -> None:
    """Restart kinesalite if it died (it holds streams in memory: they are re-produced).

    Other jobs share this machine; a benchmark must not fail because the endpoint
    vanished under an earlier one. Each restart is recorded in ``produce.json``.
    """
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    if _endpoint_alive(ctx):
        return
    pid = ctx.endpoint_pid
    _log(f"kinesalite (pid {pid}) is gone; starting a new one and re-producing streams")
    endpoints[-1].stop()
    endpoints.append(LocalKinesisEndpoint("kinesalite").start())
    ctx.shared.setdefault("endpoint_restarts", []).append(
        {"at": time.strftime("%H:%M:%S"), "old_pid": pid, "old_url": ctx.endpoint_url}
    )
    ctx.endpoint_url = endpoints[-1].url
    ctx.endpoint_pid = _endpoint_pid()
    ctx.reset_streams()


def _stop_on_signal(signum: int, _frame: Any) -> None:
    """SIGTERM/SIGINT unwind normally, so Spark children and kinesalite are stopped."""
    raise KeyboardInterrupt(f"signal {signum}")


def run_all(
    mode: str, scale: float, only: list[str], results_dir: Path, keep_work: bool
) -> dict[str, Any]:
    configure_process_env()
    # A shell starts background jobs with SIGINT ignored; take both signals back.
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGINT, _stop_on_signal)
    from benchmarks import report
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    sizes = Sizes.for_mode(mode, scale)
    environment = environment_info(mode, scale)
    environment["sizes"] = sizes.__dict__
    work_dir = new_work_dir()
    results: dict[str, Any] = {}
    failed = False
    started = time.perf_counter()
    _log(f"mode={mode} scale={scale} work dir {work_dir}")
    endpoints = [LocalKinesisEndpoint("kinesalite").start()]
    try:
        endpoint = endpoints[0]
        ctx = BenchContext(
            mode=mode,
            scale=scale,
            sizes=sizes,
            endpoint_url=endpoint.url,
            work_dir=work_dir,
            results_dir=results_dir,
            environment=environment,
            endpoint_pid=_endpoint_pid(),
        )
        selected = [name for name in BENCHMARKS if not only or name in only]
        modules = {name: importlib.import_module(f"benchmarks.{name}") for name in selected}
        try:
            for index, name in enumerate(selected):
                _ensure_endpoint(ctx, endpoints)
                this_failed = _run_one(ctx, modules[name], results)
                if this_failed and not _endpoint_alive(ctx):
                    # The endpoint died under it: one more try on a fresh endpoint.
                    ctx.stop_spark()
                    _ensure_endpoint(ctx, endpoints)
                    this_failed = _run_one(ctx, modules[name], results)
                failed |= this_failed
                # Stop a shared Spark worker as soon as no later benchmark needs it.
                later = {m for n in selected[index + 1 :] for m in modules[n].SPARK_MASTERS}
                for master in modules[name].SPARK_MASTERS:
                    if master not in later:
                        ctx.stop_spark(master)
        finally:
            ctx.stop_spark()
        if ctx.shared.get("produce") or ctx.shared.get("endpoint_restarts"):
            write_result(
                ctx,
                "produce",
                {
                    "streams": ctx.shared.get("produce", []),
                    "endpoint_restarts": ctx.shared.get("endpoint_restarts", []),
                },
            )
    finally:
        for started_endpoint in endpoints:
            started_endpoint.stop()
    total = round(time.perf_counter() - started, 1)
    report.write_report(results_dir, environment, results, total_seconds=total)
    _log(f"done in {total} s; report {results_dir / 'REPORT.md'}")
    if failed or keep_work:
        _log(f"scratch data kept in {work_dir}")
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    return results


def _run_one(ctx: BenchContext, module: Any, results: dict[str, Any]) -> bool:
    """Run one benchmark and write its JSON; True if it failed (the others still run)."""
    _log(f"{module.NAME}: running (load {load_now()})")
    began = time.perf_counter()
    failed = False
    try:
        result = module.run(ctx)
    except Exception as error:  # recorded in the results and the report
        failed = True
        result = {
            "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(),
            "verdict": "error",
        }
        _log(f"{module.NAME}: FAILED {error}")
    result["duration_s"] = round(time.perf_counter() - began, 1)
    write_result(ctx, module.NAME, result)
    results[module.NAME] = result
    _log(
        f"{module.NAME}: {result.get('verdict')} ratio={result.get('ratio')} "
        f"in {result['duration_s']} s"
    )
    return failed


def _report_only(results_dir: Path) -> int:
    from benchmarks import report

    found = sorted(results_dir.glob("*.json"))
    results = {}
    for path in found:
        data = json.loads(path.read_text())
        if "benchmark" in data and not path.name.startswith(("profile_", "produce")):
            results[data["benchmark"]] = data
    if not results:
        print(f"no results in {results_dir}", file=sys.stderr)
        return 1
    # The header describes the invocation most results come from; the runs note names
    # the others (a benchmark re-run alone, on another day or machine).
    by_start = Counter(r["environment"]["timestamp"] for r in results.values())
    main_start = by_start.most_common(1)[0][0]
    environment = next(
        r["environment"] for r in results.values() if r["environment"]["timestamp"] == main_start
    )
    total = sum(r.get("duration_s", 0) for r in results.values())
    path = report.write_report(results_dir, environment, results, total_seconds=total)
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_const", const="quick", dest="mode")
    modes.add_argument("--full", action="store_const", const="full", dest="mode")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply record counts (development: 0.05); size ratios stay 10x",
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {BENCHMARKS}")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--keep-work", action="store_true", help="keep scratch data")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite REPORT.md and plots from the JSON results already there",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        return _report_only(args.results_dir)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}; choose from {BENCHMARKS}")
    results = run_all(args.mode or "quick", args.scale, only, args.results_dir, args.keep_work)
    return 1 if any(r.get("verdict") == "error" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
