"""The derived-table simulation's schedules (see ``derived``): the declaration it edits, the
records it puts and the seeded draw of steps, apart from the lake they run against."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

INT_MAX = 2**31 - 1
DAYS = ("2024-05-01", "2024-05-02")
HOURS = ("09", "10", "23")
USERS = ("ann", "bob", "cid")

BASE = """\
tables:
  - name: views
    route: {type: view}
    fields:
      - {name: id, type: string, required: true}
      - {name: n, type: int}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    dedup: id
  - name: updates
    route: {type: profile}
    fields:
      - {name: id, type: string, required: true}
      - {name: user_id, type: string}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
derived:
  - name: profiles
    from: updates
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
  - name: views_per_hour
    sql: SELECT date_trunc('hour', at) AS hour, count(*) AS views, max(n) AS top
      FROM views GROUP BY 1
    refresh: windowed
    window: {column: at, size: hour, output: hour}
  - name: profile_count
    sql: SELECT count(*) AS profiles FROM profiles
    refresh: full
"""
SIGNUPS = """\
  - name: signups
    route: {type: signup}
    fields:
      - {name: id, type: string, required: true}
"""
EDITS = ("add_table", "add_field", "widen")
RAW = "raw_events"
ROUTED = ("views", "updates")
DERIVED = ("profiles", "views_per_hour", "profile_count")
SOURCES = {  # each table a derive commits to, with the table it reads
    "quarantine": RAW,
    **dict.fromkeys((*ROUTED, "signups"), RAW),  # signups: after the add_table edit
    "profiles": "updates",
    "views_per_hour": "views",
    "profile_count": "profiles",
}
READ = tuple(sorted(set(SOURCES.values())))  # sorted: a set's order varies per process
WINDOWED_SQL = (  # DuckDB's, "at" quoted
    "SELECT date_trunc('hour', \"at\") AS hour, count(*) AS views, max(n) AS top FROM views "
    "GROUP BY 1"
)


def declaration(edits: set[str]) -> str:
    text = BASE
    if "widen" in edits:
        text = text.replace("{name: n, type: int}", "{name: n, type: long}")
    if "add_field" in edits:
        text = text.replace(
            "      - {name: n, type:", "      - {name: note, type: string}\n      - {name: n, type:"
        )
    if "add_table" in edits:
        text = text.replace("derived:\n", SIGNUPS + "derived:\n")
    return text


@dataclass(frozen=True)
class Step:
    kind: str  # put | derive | fail | edit | replay | drop | maintain | race
    records: tuple[Any, ...] = ()  # put: dicts or bytes
    arg: str = ""  # fail: table/mode; edit: which; drop/maintain: table; race: source@table

    def __str__(self) -> str:
        if self.kind == "put":
            return f"put({', '.join(show_record(r) for r in self.records)})"
        return f"{self.kind}({self.arg})" if self.arg else f"{self.kind}()"


def show_record(record: Any) -> str:
    if isinstance(record, bytes):
        return repr(record)
    return json.dumps(record, separators=(",", ":"))


@dataclass
class Schedule:
    seed: int
    steps: list[Step]

    def replay(self) -> str:
        return "\n".join(f"  {i}. {s}" for i, s in enumerate(self.steps))


def _record(rng: random.Random, serial: int, views: list[dict]) -> Any:
    day, hour = rng.choice(DAYS), rng.choice(HOURS)
    at = f"{day}T{hour}:{rng.randrange(60):02d}:00Z"
    kind = rng.choices(
        ("view", "repeat", "malformed", "unrouted", "wrong", "big", "profile", "delete"),
        weights=(5, 2, 1, 2, 1, 1, 4, 1),
    )[0]
    if kind == "repeat" and views:
        first = rng.choice(views)
        # same key, same UTC day: a duplicate (another time that day)
        return {**first, "at": first["at"][:11] + f"{rng.choice(HOURS)}:59:00Z", "n": 1}
    if kind in ("view", "repeat"):
        record = {"id": f"v{serial}", "type": "view", "n": rng.randrange(100), "at": at}
        if rng.random() < 0.3:
            record["note"] = f"note{serial}"
        views.append(record)
        return record
    if kind == "malformed":
        return b'{"id": "m%d", "type": ' % serial
    if kind == "unrouted":
        return {"id": f"s{serial}", "type": "signup"}
    if kind == "wrong":
        return {"id": f"w{serial}", "type": "view", "n": "many", "at": at}
    if kind == "big":
        return {"id": f"b{serial}", "type": "view", "n": 3_000_000_000 + serial, "at": at}
    op = "delete" if kind == "delete" else "upsert"
    return {
        "id": f"p{serial}",
        "type": "profile",
        "user_id": rng.choice(USERS),
        "version": rng.randrange(1, 6),
        "op": op,
        "at": at,
    }


def generate(seed: int, *, steps: tuple[int, int] = (4, 12), faults: bool = True) -> Schedule:
    rng = random.Random(seed)
    serial = 0
    views: list[dict] = []
    edits = list(EDITS)
    rng.shuffle(edits)
    out: list[Step] = []
    for index in range(rng.randint(*steps)):
        choice = (
            "put"
            if index == 0
            else rng.choices(
                ("put", "derive", "fail", "edit", "replay", "drop", "maintain", "race"),
                # "race" last with no weight without faults: those schedules stay as they were
                weights=(5, 5, 1 if faults else 0, 2 if edits else 0, 2, 1, 1, 2 if faults else 0),
            )[0]
        )
        if choice == "put":
            records = []
            for _ in range(rng.randint(1, 5)):
                serial += 1
                records.append(_record(rng, serial, views))
            out.append(Step("put", tuple(records)))
        elif choice == "fail":
            table = rng.choice(("quarantine", "views", "updates", *DERIVED))
            mode = rng.choice(("raises-before", "lands-then-raises"))
            out.append(Step("fail", arg=f"{table}/{mode}"))
        elif choice == "edit":
            out.append(Step("edit", arg=edits.pop()))
        elif choice == "drop":
            out.append(Step("drop", arg=rng.choice(("views", "updates", *DERIVED))))
        elif choice == "maintain":
            out.append(Step("maintain", arg=rng.choice((*ROUTED, "profiles"))))
        elif choice == "race":  # mostly upkeep of the very table the commit read
            table = rng.choice(tuple(SOURCES))
            source = SOURCES[table] if rng.random() < 0.7 else rng.choice(READ)
            out.append(Step("race", arg=f"{source}@{table}"))
        else:
            out.append(Step(choice))
    out.append(Step("derive"))  # every schedule ends converged
    return Schedule(seed, out)
