"""Every size a benchmark uses, per mode (quick or full) and development scale."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Every size a benchmark uses, so quick and full differ in one place only."""

    backlog: int
    memory_small: int
    memory_large: int
    derive_small: int
    derive_large: int
    derive_new_rows: int
    derive_rounds: int
    upsert_small: int
    upsert_large: int
    upsert_updates: int
    upsert_rounds: int
    upsert_file_bytes: int
    upsert_read_refreshes: int
    commits: int
    many_shards: int
    dagster_seconds: float
    commit_expire_every: int
    freshness_seconds: float
    freshness_warmup_seconds: float
    freshness_rate: int
    freshness_triggers: tuple[str, ...]
    hand_written_limit: int = 10_000

    @classmethod
    def for_mode(cls, mode: str, scale: float = 1.0) -> Sizes:
        """Sizes for ``quick`` or ``full``; ``scale`` shrinks record counts for development.

        Ratios between sizes (10x for memory and derive) stay fixed whatever the scale.
        """

        def n(value: int, minimum: int = 400) -> int:
            return max(minimum, int(value * scale))

        if mode == "full":
            return cls(
                backlog=n(2_000_000),
                memory_small=n(100_000),
                memory_large=n(1_000_000, 4_000),
                derive_small=n(100_000),
                derive_large=n(1_000_000, 4_000),
                derive_new_rows=n(10_000, 100),
                derive_rounds=3,
                upsert_small=n(1_000_000),
                upsert_large=n(10_000_000, 4_000),
                upsert_updates=1_000,
                upsert_rounds=3,
                upsert_file_bytes=8 * 1024 * 1024,
                upsert_read_refreshes=100,
                commits=max(20, int(1_000 * min(scale, 1.0))),
                many_shards=max(8, int(500 * min(scale, 1.0))),
                dagster_seconds=max(60.0, 300 * min(scale, 1.0)),
                commit_expire_every=50,
                freshness_seconds=max(20.0, 120 * min(scale * 4, 1.0)),
                freshness_warmup_seconds=15.0,
                freshness_rate=1_000,
                freshness_triggers=("0.5 seconds", "1 second", "5 seconds"),
            )
        return cls(
            backlog=n(200_000),
            memory_small=n(20_000),
            memory_large=n(200_000, 4_000),
            derive_small=n(10_000),
            derive_large=n(100_000, 4_000),
            derive_new_rows=n(10_000, 100),
            derive_rounds=2,
            upsert_small=n(20_000),
            upsert_large=n(200_000, 4_000),
            upsert_updates=1_000,
            upsert_rounds=3,
            upsert_file_bytes=160 * 1024,
            upsert_read_refreshes=100,
            commits=max(20, int(1_000 * min(scale * 4, 1.0))),
            many_shards=max(8, int(500 * min(scale * 4, 1.0))),
            dagster_seconds=max(60.0, 150 * min(scale * 4, 1.0)),
            commit_expire_every=50,
            freshness_seconds=max(15.0, 30 * min(scale * 4, 1.0)),
            freshness_warmup_seconds=10.0,
            freshness_rate=1_000,
            freshness_triggers=("0.5 seconds", "1 second"),
        )
