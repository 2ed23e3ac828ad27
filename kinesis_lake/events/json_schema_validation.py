"""JSON payloads checked against the JSON Schema their registry version names, as the
registry's JSON serializers check them before sending: a record that does not validate was
not written by one of them (or was changed since), and the table must not take it.

Validators are made once per definition (a version never changes) with the draft the
schema's ``$schema`` names (2020-12 when it names none).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import jsonschema

Validate = Callable[[Any], str | None]
"""An object in, why it does not validate (None: it does) out."""
_VALIDATORS: dict[str, Validate | str] = {}
_LOCK = threading.Lock()


def json_schema_validator(definition: str) -> Validate | str:
    """The validator of JSON Schema ``definition``, or why there is none (the registry's
    own checks are not to be relied on: moto's have none)."""
    with _LOCK:
        known = _VALIDATORS.get(definition)
    if known is None:
        known = _validator(definition)
        with _LOCK:
            _VALIDATORS[definition] = known
    return known


def _validator(definition: str) -> Validate | str:
    try:
        schema = json.loads(definition)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except (json.JSONDecodeError, jsonschema.SchemaError) as exc:
        reason = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
        return f"JSON Schema does not parse: {type(exc).__name__}: {reason}"
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def validate(value: Any) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        at = ".".join(str(part) for part in error.absolute_path)
        where = f"at {at}: " if at else ""
        return f"JSON payload does not validate against its JSON Schema: {where}{error.message}"

    return validate
