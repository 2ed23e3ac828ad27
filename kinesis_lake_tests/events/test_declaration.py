"""The lake declaration: tables, routes and partitions from one YAML file, errors with lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinesis_lake.events.declaration import DeclarationError, LakeDeclaration, PartitionDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.routes import NO_ROUTE, Condition, Route, RouteError
from kinesis_lake_tests.events.raw import NOW, raw_table

LAKE = """\
tables:
  - name: page_views
    description: Pages people looked at.
    route:
      event_type: page_view
    fields:
      - {name: event_id, type: string, required: true}
      - {name: event_type, type: string, required: true}
      - {name: url, type: string}
    dedup: event_id
  - name: purchases
    route:
      event_type: {one_of: [purchase, refund]}
      context.device.os: {exists: true}
    fields:
      - {name: event_id, type: string, required: true}
      - {name: amount, type: double}
      - {name: currency, type: string}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    partition:
      - {field: at, transform: hour}
      - {field: currency, transform: identity}
  - name: everything
    fields:
      - {name: event_type, type: string}
aggregate: {table: everything}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lake.yaml"
    path.write_text(text)
    return path


def test_a_lake_declares_tables_routes_partitions_and_the_aggregate_source(tmp_path):
    lake = load_declaration(_write(tmp_path, LAKE))

    assert lake.names == ["page_views", "purchases", "everything"]
    assert lake.aggregate_source == "everything"
    views, purchases, everything = lake.tables
    assert views.description == "Pages people looked at."
    assert views.schema.event_key == "event_id"
    assert views.route == Route((Condition(("event_type",), "equals", "page_view"),))
    assert purchases.partition == (
        PartitionDeclaration("at", "hour"),
        PartitionDeclaration("currency", "identity"),
    )
    assert purchases.schema.event_time_field == "at"
    assert everything.route == Route()
    assert LakeDeclaration.from_dict(json.loads(json.dumps(lake.to_dict()))).tables == lake.tables


def test_a_plain_event_schema_is_one_table_named_events_taking_everything(tmp_path):
    path = _write(tmp_path, "name: anything\nfields:\n  - {name: key1, type: string}\n")
    (table,) = load_declaration(path).tables
    assert table.name == "events"
    assert table.route == Route()
    assert load_declaration(path).aggregate_source == "events"


def _line_of(text: str, fragment: str) -> int:
    return text.splitlines().index(fragment) + 1


BROKEN = {
    "unknown table key": (
        LAKE.replace("    dedup: event_id\n", "    dedupe: event_id\n"),
        "  - name: page_views",
        "tables[0]: unknown key 'dedupe'; allowed keys: name, description, stream, route, "
        "fields, schema_file, registry_schema, dedup, event_time_field, event_type_field, "
        "partition",
    ),
    "unknown operator": (
        LAKE.replace("{one_of: [purchase, refund]}", "{in: [purchase, refund]}"),
        "  - name: purchases",
        "table 'purchases': route condition on 'event_type': unknown operator 'in'; use one "
        "of equals, one_of, exists, prefix, matches",
    ),
    "bad regular expression": (
        LAKE.replace("event_type: page_view\n", "url: {matches: '(unclosed'}\n"),
        "  - name: page_views",
        "table 'page_views': route condition on 'url': invalid regular expression: "
        "missing ), unterminated subpattern at position 0",
    ),
    "hour of a string": (
        LAKE.replace("{field: at, transform: hour}", "{field: currency, transform: hour}"),
        "  - name: purchases",
        "table 'purchases': partition hour(currency) needs a timestamp or date field, "
        "currency is string",
    ),
    "bucket without width": (
        LAKE.replace(
            "{field: currency, transform: identity}", "{field: currency, transform: bucket}"
        ),
        "  - name: purchases",
        "table 'purchases': partition on 'currency': bucket needs width, a positive integer",
    ),
    "dedup on an undeclared field": (
        LAKE.replace("dedup: event_id", "dedup: id"),
        "  - name: page_views",
        "dedup 'id' is not a declared field",
    ),
    "a lake's own table name": (
        LAKE.replace("name: everything", "name: raw_events"),
        "  - name: raw_events",
        "tables[2]: name 'raw_events' is the lake's own table; choose another name",
    ),
    "declared twice": (
        LAKE.replace("name: everything", "name: purchases"),
        "  - name: purchases",
        "table 'purchases' is declared twice",
    ),
}


@pytest.mark.parametrize(("text", "entry", "message"), BROKEN.values(), ids=BROKEN.keys())
def test_errors_name_the_file_the_line_and_the_fix(tmp_path, text, entry, message):
    path = _write(tmp_path, text)
    lines = [n + 1 for n, line in enumerate(text.splitlines()) if line == entry]
    with pytest.raises(DeclarationError) as caught:
        load_declaration(path)
    assert str(caught.value).startswith(f"{path}:{lines[-1]}: "), str(caught.value)
    assert message in str(caught.value)


def test_an_aggregate_over_an_undeclared_table_names_the_choices(tmp_path):
    path = _write(tmp_path, LAKE.replace("{table: everything}", "{table: nothing}"))
    with pytest.raises(DeclarationError, match=re.escape(f"{path}:")) as caught:
        load_declaration(path)
    assert "must name a declared table (everything, page_views, purchases)" in str(caught.value)


CONDITIONS = [
    # (condition, record, holds)
    (Condition(("a",), "equals", 1), {"a": 1}, True),
    (Condition(("a",), "equals", 1), {"a": True}, False),  # JSON true is not 1
    (Condition(("a",), "equals", True), {"a": 1}, False),
    (Condition(("a",), "equals", "1"), {"a": 1}, False),  # values, not text
    (Condition(("a",), "equals", None), {"a": None}, True),
    (Condition(("a",), "equals", None), {}, False),
    (Condition(("a", "b"), "one_of", ("x", "y")), {"a": {"b": "y"}}, True),
    (Condition(("a", "b"), "one_of", ("x", "y")), {"a": "b"}, False),
    (Condition(("a", "b"), "exists", True), {"a": {"b": 0}}, True),
    (Condition(("a", "b"), "exists", True), {"a": {"b": None}}, False),  # null is absent
    (Condition(("a", "b"), "exists", False), {"a": [1]}, True),
    (Condition(("u",), "prefix", "https://"), {"u": "https://x"}, True),
    (Condition(("u",), "prefix", "https://"), {"u": 5}, False),
    (Condition(("u",), "matches", r"\.example\.(com|org)$"), {"u": "a.example.org"}, True),
    (Condition(("u",), "matches", r"^b"), {"u": "ab"}, False),
]


@pytest.mark.parametrize(("condition", "record", "holds"), CONDITIONS)
def test_conditions_compare_decoded_json_values(condition, record, holds):
    assert condition.holds(record) is holds


def test_a_condition_that_cannot_work_is_refused_when_declared():
    with pytest.raises(RouteError, match="one_of takes a list"):
        Route.from_dict({"a": {"one_of": "x"}})
    with pytest.raises(RouteError, match="give exactly one operator"):
        Route.from_dict({"a": {"prefix": "x", "matches": "y"}})
    with pytest.raises(RouteError, match="exists takes true or false"):
        Route.from_dict({"a": {"exists": "yes"}})


# ---- routing every record: property-based against a plain model -------------------------

ROUTING = """\
tables:
  - name: views
    route: {kind: view}
    fields: [{name: n, type: long, required: true}]
  - name: mobile
    route: {device.os: {one_of: [ios, android]}}
    fields: [{name: n, type: long}]
  - name: tagged
    route: {tag: {prefix: "t-"}}
    fields: [{name: n, type: long}]
"""

_records = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["view", "click", 1, True, None]),
        "device": st.one_of(
            st.fixed_dictionaries({}, optional={"os": st.sampled_from(["ios", "android", "x"])}),
            st.just("ios"),
        ),
        "tag": st.sampled_from(["t-1", "x-t-", "t", None]),
        "n": st.one_of(st.integers(-5, 5), st.just("not a number"), st.none()),
    },
)
_payloads = st.one_of(
    _records.map(lambda r: json.dumps(r).encode()),
    st.sampled_from([b"{not json", b"[1, 2]", b""]),
)


def _model(record: dict) -> set[str]:
    """Which tables a record belongs to, written plainly from the declaration's words."""
    device = record.get("device")
    tag = record.get("tag")
    return {
        name
        for name, takes in (
            ("views", record.get("kind") == "view"),
            ("mobile", isinstance(device, dict) and device.get("os") in ("ios", "android")),
            ("tagged", isinstance(tag, str) and tag.startswith("t-")),
        )
        if takes
    }


@settings(max_examples=150, deadline=None)
@given(payloads=st.lists(_payloads, max_size=25))
def test_every_raw_row_lands_where_its_routes_say_or_once_in_quarantine(tmp_path_factory, payloads):
    path = tmp_path_factory.mktemp("routing") / "lake.yaml"
    path.write_text(ROUTING)
    routed = route_events(raw_table(payloads), load_declaration(path), now=NOW)

    outcomes: dict[int, list[str | None]] = {row: [] for row in range(len(payloads))}
    for name, table in routed.tables.items():
        for sequence in table.column("sequence_number").to_pylist():
            outcomes[int(sequence) - 1].append(name)
    errors: dict[int, str] = {}
    for row in routed.quarantine.to_pylist():
        outcomes[int(row["sequence_number"]) - 1].append(row["target_table"])
        if row["target_table"] is None:
            errors[int(row["sequence_number"]) - 1] = row["error"]

    for row, payload in enumerate(payloads):
        try:
            record = json.loads(payload)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            assert outcomes[row] == [None], payload
            assert errors[row] != NO_ROUTE
            continue
        expected = _model(record)
        if not expected:
            assert outcomes[row] == [None], payload
            assert errors[row] == NO_ROUTE
        else:
            assert sorted(outcomes[row]) == sorted(expected), payload


def test_the_readmes_full_example_is_a_valid_declaration(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("A full example, every key used once:\n\n```yaml\n", 1)[1]
    lake = load_declaration(_write(tmp_path, example.split("```", 1)[0]))
    (purchases,) = lake.tables
    assert len(purchases.route.conditions) == 5
    assert [p.transform for p in purchases.partition] == ["day", "identity", "bucket", "truncate"]
    assert purchases.route.takes(
        {
            "event_type": "refund",
            "order": {"items": []},
            "source": "app",
            "page": {"url": "https://x"},
            "campaign": "spring-24",
        }
    )


STREAMS = """\
streams:
  - {name: web-clicks, description: The site's clickstream.}
  - {name: orders, raw_table: raw_order_events}
tables:
  - name: clicks
    stream: web-clicks
    fields: [{name: id, type: string}]
  - name: orders
    stream: orders
    fields: [{name: id, type: string}]
"""


def test_streams_are_declared_with_their_raw_tables_and_tables_name_theirs(tmp_path):
    lake = load_declaration(_write(tmp_path, STREAMS))

    assert [(s.name, s.raw_table) for s in lake.streams] == [
        ("web-clicks", "raw_web_clicks"),
        ("orders", "raw_order_events"),
    ]
    assert [t.stream for t in lake.tables] == ["web-clicks", "orders"]
    assert lake.for_stream("orders").names == ["orders"]
    assert LakeDeclaration.from_dict(json.loads(json.dumps(lake.to_dict()))).streams == lake.streams


def test_with_one_stream_declared_its_tables_need_not_name_it(tmp_path):
    text = "streams:\n  - {name: only}\n" + LAKE
    lake = load_declaration(_write(tmp_path, text))
    assert {t.stream for t in lake.tables} == {"only"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (STREAMS.replace("    stream: orders\n", ""), "table 'orders': say which stream it reads"),
        (STREAMS.replace("stream: orders", "stream: order"), "stream 'order' is not declared"),
        (STREAMS.replace("raw_order_events", "clicks"), "table 'clicks' is declared twice"),
        (STREAMS.replace("name: orders, raw", "name: web-clicks, raw"), "declared twice"),
        (STREAMS.replace("{name: orders,", "{name: 'a b',"), "must be a Kinesis stream name"),
    ],
)
def test_stream_mistakes_name_the_line_and_the_fix(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(DeclarationError, match=re.escape(message)) as caught:
        load_declaration(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(caught.value)), str(caught.value)
