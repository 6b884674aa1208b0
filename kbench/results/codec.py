"""Typed records to JSON and back, checked field by field on the way in (pydantic reads the frozen dataclasses as
they are). The one place kbench turns outside data into its records: the pipe between parent and child, run files."""

from __future__ import annotations

import functools
import json
from collections.abc import Hashable
from typing import Any, TypeVar, cast

T = TypeVar("T")

# Free-form parsed JSON: a document read as it is, whose keys no record fixes (a run file before its records are
# checked, a line on the pipe; problem.toml, TOML's values being JSON's). Structured data gets a record or TypedDict.
JsonObject = dict[str, Any]


class ProtocolError(ValueError):
    """Data that is not the record it should be: a job or result on the pipe, a run file, or a reply the candidate's
    process sent the judge (kbench.judge.candidate.protocol.decode)."""


@functools.cache
def _adapter(kind: Any) -> Any:
    from pydantic import TypeAdapter  # imported on first use: `kbench --help` does not pay for it

    return TypeAdapter(kind)


def prepare(*kinds: Any) -> None:
    """Build the checkers of these record types now (tens of milliseconds), before a job waits on them."""
    for kind in kinds:
        _adapter(kind)


def encode(record: Any) -> str:
    """A record as one line of JSON (NaN and infinities as Python's json writes them: a trial's error may be NaN)."""
    return json.dumps(to_wire(record))


def to_wire(record: Any, kind: Any = None) -> Any:
    """A record (of type `kind`, default its own) as plain JSON values (dicts, lists, numbers, strings); a value JSON
    has no type for, in a record's free-form figures (a dtype, say), as its str()."""
    return _adapter(cast(Hashable, kind or type(record))).dump_python(record, mode="json", fallback=str)


def decode(kind: type[T], value: Any) -> T:
    """The record of type `kind` in `value` (JSON values already parsed), checked field by field."""
    return _checked(kind, lambda adapter: adapter.validate_python(value))


def decode_json(kind: type[T], text: str | bytes) -> T:
    """The record of type `kind` in the JSON `text`, checked field by field."""
    return _checked(kind, lambda adapter: adapter.validate_json(text))


def _checked(kind: type[T], validate: Any) -> T:
    from pydantic import ValidationError  # heavy: pydantic on first use, as in _adapter

    try:
        return validate(_adapter(cast(Hashable, kind)))  # a class is hashable (mypy does not see it for type[T])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the record"
        raise ProtocolError(f"not a valid {getattr(kind, '__name__', kind)}: {where}: {first['msg']} "
                            f"({exc.error_count()} error(s))") from None
