"""Task arguments as JSON: what ``@app.task`` functions take and how they travel in the payload.

A deferred call is stored as the JSON object ``{"task": NAME, "args": {ARG: VALUE, …}}`` (UTF-8).
Values are JSON's own (``str``, ``int``, ``float`` — finite —, ``bool``, ``None``, ``list``,
``dict`` with ``str`` keys) plus four types that come back as themselves with equal values:

==================  ================================================================
``datetime``        aware or naive (naive stays naive; a ``zoneinfo`` zone comes back as that zone,
                    with the same wall time and fold; any other tzinfo as its fixed offset);
                    ``{"$shardq": "datetime", "v": ISO 8601}``
``date``            ``{"$shardq": "date", "v": "YYYY-MM-DD"}``
``UUID``            ``{"$shardq": "uuid", "v": "…"}``
``Decimal``         ``{"$shardq": "decimal", "v": "…"}`` (exact, as its string)
==================  ================================================================

Anything else (tuples, sets, bytes, objects, NaN, non-string keys, a dict that looks like a tag)
is refused at encode time with :class:`~shardq.errors.InvalidInput` naming the argument, so
nothing is written for a call that could not come back as it was made.
"""

from __future__ import annotations

import datetime as dt
import json
import json.encoder
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from shardq.errors import InvalidInput

TAG = "$shardq"
_TAG_TEXT = f'"{TAG}"'
# One encoder and decoder for every call: json.dumps/json.loads build or look one up each time and
# sniff the encoding of bytes, which costs as much as the work itself for a small call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder()


def _unencodable(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


# The C encoder itself, made once (JSONEncoder.encode makes one per call, half of a small call's
# cost); the same output as _ENCODER. None where CPython's accelerator is missing.
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE = (
    _C_MAKE_ENCODER(None, _unencodable, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
    if _C_MAKE_ENCODER is not None
    else None
)
_PLAIN = (str, bool, int, type(None))


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"argument {where}: {value} is not a finite number")
        return value
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        encoded = {TAG: "datetime", "v": value.isoformat()}
        if isinstance(value.tzinfo, ZoneInfo):
            encoded["zone"] = value.tzinfo.key  # the zone itself, not just this instant's offset
        return encoded
    if isinstance(value, dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, list):
        return [_encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        if TAG in value:
            raise InvalidInput(f"argument {where}: a dict may not have the key {TAG!r} (shardq's own)")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"argument {where}: dict keys must be str, not {type(key).__name__}")
            out[key] = _encode(item, f"{where}[{key!r}]")
        return out
    raise InvalidInput(
        f"argument {where}: {type(value).__name__} cannot be stored as a task argument "
        "(JSON values, datetime, date, UUID and Decimal can)"
    )


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if isinstance(value, dict):
        kind = value.get(TAG)
        if kind is None:
            return {key: _decode(item) for key, item in value.items()}
        text = value["v"]
        if kind == "datetime":
            moment = dt.datetime.fromisoformat(text)
            return _in_zone(moment, ZoneInfo(value["zone"])) if "zone" in value else moment
        if kind == "date":
            return dt.date.fromisoformat(text)
        if kind == "uuid":
            return uuid.UUID(text)
        if kind == "decimal":
            return Decimal(text)
        raise ValueError(f"unknown shardq argument type {kind!r}")
    return value


def _in_zone(moment: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """``moment`` (a wall time with the offset it was written with) back in ``zone``: the same wall
    time, with the fold whose offset it was written with. So a repeated hour's second pass stays
    the second, and a wall time inside a gap (which ``astimezone`` would move to the instant's
    other name) stays as the caller wrote it. If neither fold has that offset (the zone's rules
    changed since), the instant is kept instead."""
    for fold in (0, 1):
        wall = moment.replace(tzinfo=zone, fold=fold)
        if wall.utcoffset() == moment.utcoffset():
            return wall
    return moment.astimezone(zone)


def encode_call(task: str, arguments: Mapping[str, Any], trace: Mapping[str, str] | None = None) -> bytes:
    """The payload of a call of ``task`` with keyword ``arguments``; refuses what would not come
    back unchanged. ``trace``: a trace-context carrier stored beside them (``"trace"``; see
    :mod:`shardq.instrumentation`); None writes no key."""
    args: Mapping[str, Any]
    for value in arguments.values():
        if type(value) not in _PLAIN:
            args = {name: value if type(value) in _PLAIN else _encode(value, name) for name, value in arguments.items()}
            break
    else:
        args = arguments  # only str, int, bool and None: nothing to convert
    document: dict[str, Any] = {"task": task, "args": args}
    if trace is not None:
        document["trace"] = trace
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(document, 0)).encode()
    return _ENCODER.encode(document).encode()


def decode_call(payload: bytes) -> tuple[str, dict[str, Any]]:
    """(task name, keyword arguments) of a payload written by :func:`encode_call`. Raises
    ``ValueError`` for a payload that is not one."""
    name, arguments, _trace = decode_traced_call(payload)
    return name, arguments


def decode_traced_call(payload: bytes) -> tuple[str, dict[str, Any], dict[str, str] | None]:
    """:func:`decode_call`, and the trace carrier stored with the call (None when there is none,
    or it is not an object)."""
    try:
        text = payload.decode() if isinstance(payload, (bytes, bytearray, memoryview)) else payload
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    document = _DECODER.decode(text)
    if not isinstance(document, dict) or not isinstance(document.get("task"), str):
        raise ValueError("not a shardq task call (no task name)")
    args = document.get("args", {})
    if not isinstance(args, dict):
        raise ValueError("not a shardq task call (args is not an object)")
    trace = document.get("trace")
    if trace is not None and not isinstance(trace, dict):
        trace = None
    if _TAG_TEXT not in text:  # no tagged value anywhere: JSON's own values are the arguments
        return document["task"], args, trace
    return document["task"], {name: _decode(value) for name, value in args.items()}, trace


def task_name_of(payload: bytes | bytearray | memoryview | str) -> str | None:
    """The task name a payload written by :func:`encode_call` carries, or None for any other
    payload (bytes an application enqueued itself). Never raises: status and history show the
    name when there is one."""
    data = payload.encode() if isinstance(payload, str) else bytes(payload)
    # encode_call writes the name first: read it without decoding the arguments (the settler
    # asks this once per finished task of a queue that keeps them).
    if data.startswith(_NAME_PREFIX):
        end = data.find(b'"', len(_NAME_PREFIX))
        name = data[len(_NAME_PREFIX) : end]
        if end > 0 and b"\\" not in name:
            try:
                return name.decode()
            except UnicodeDecodeError:
                return None
    if not data.lstrip().startswith(b"{"):  # not a JSON object: an application's own bytes
        return None
    try:
        return decode_call(data)[0]
    except ValueError:
        return None


_NAME_PREFIX = b'{"task":"'
