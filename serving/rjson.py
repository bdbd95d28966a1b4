"""JSON text the way TF Serving's rapidjson writes and rejects it.

TF Serving answers REST calls through rapidjson's PrettyWriter and quotes request values in its
error messages through the same writer; reproducing both keeps response bodies and error texts
byte-for-byte comparable with a real tensorflow/serving container.
"""

from __future__ import annotations

import contextlib
import json
import re
from decimal import Decimal
from typing import Any

from serving.errors import invalid_argument

_INDENT = "    "
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
_DEBUG_LIMIT = 256  # kMaxJsonDebugStringBytes in json_tensor.cc


class _Full(Exception):
    """Raised once a size-limited writer has written enough (JsonWriterWithLimit)."""


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ESCAPES.get(char) or f"\\u{ord(char):04X}"


def quote(text: str) -> str:
    """A JSON string literal as rapidjson escapes it (uppercase \\u00XX, '/' left alone)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


class PrettyWriter:
    """rapidjson::PrettyWriter: 4-space indent, with kFormatSingleLineArray switchable."""

    def __init__(self, *, limit: int | None = None) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._limit = limit
        self._levels: list[list[Any]] = []  # [in_array, value_count]
        self.single_line_arrays = False

    def text(self) -> str:
        return "".join(self._parts)

    def _put(self, text: str) -> None:
        self._parts.append(text)
        self._size += len(text)

    def _check(self) -> None:
        if self._limit is not None and self._size >= self._limit:
            raise _Full

    def _prefix(self) -> None:
        if not self._levels:
            return
        level = self._levels[-1]
        if level[0]:
            if level[1] > 0:
                self._put(", " if self.single_line_arrays else ",")
            if not self.single_line_arrays:
                self._put("\n" + _INDENT * len(self._levels))
        else:
            if level[1] > 0:
                self._put(",\n" if level[1] % 2 == 0 else ": ")
            else:
                self._put("\n")
            if level[1] % 2 == 0:
                self._put(_INDENT * len(self._levels))
        level[1] += 1

    def _scalar(self, text: str) -> None:
        self._check()
        self._prefix()
        self._put(text)

    def raw(self, text: str) -> None:
        self._scalar(text)

    def string(self, text: str) -> None:
        self._scalar(quote(text))

    def key(self, text: str) -> None:
        self._scalar(quote(text))

    def start_object(self) -> None:
        self._scalar("{")
        self._levels.append([False, 0])

    def end_object(self) -> None:
        self._check()
        level = self._levels.pop()
        if level[1]:
            self._put("\n" + _INDENT * len(self._levels))
        self._put("}")

    def start_array(self) -> None:
        self._scalar("[")
        self._levels.append([True, 0])

    def end_array(self) -> None:
        self._check()
        level = self._levels.pop()
        if level[1] and not self.single_line_arrays:
            self._put("\n" + _INDENT * len(self._levels))
        self._put("]")


def format_double(value: float) -> str:
    """rapidjson Writer::Double (Grisu shortest digits, then its Prettify rules)."""
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple)) or "0"
    assert isinstance(exponent, int)
    prefix = "-" if sign else ""
    if digits == "0":
        return prefix + "0.0"
    length, k = len(digits), exponent
    kk = length + k
    if k >= 0 and kk <= 21:
        return prefix + digits + "0" * k + ".0"
    if 0 < kk <= 21:
        return prefix + digits[:kk] + "." + digits[kk:]
    if -6 < kk <= 0:
        return prefix + "0." + "0" * -kk + digits
    mantissa = digits if length == 1 else digits[0] + "." + digits[1:]
    return f"{prefix}{mantissa}e{kk - 1}"


def write_value(writer: PrettyWriter, value: Any) -> None:
    """Replays a parsed JSON value into the writer, as rapidjson's Value::Accept does."""
    if isinstance(value, dict):
        writer.start_object()
        for name, item in value.items():
            writer.key(name)
            write_value(writer, item)
        writer.end_object()
    elif isinstance(value, list):
        writer.start_array()
        for item in value:
            write_value(writer, item)
        writer.end_array()
    elif isinstance(value, str):
        writer.string(value)
    elif value is None:
        writer.raw("null")
    elif isinstance(value, bool):
        writer.raw("true" if value else "false")
    elif isinstance(value, int):
        writer.raw(str(value))
    else:
        writer.raw(format_double(value))


def debug_string(value: Any) -> str:
    """JsonValueToDebugString: single-line arrays, cut off after about 256 bytes."""
    writer = PrettyWriter(limit=_DEBUG_LIMIT)
    writer.single_line_arrays = True
    with contextlib.suppress(_Full):
        write_value(writer, value)
    return writer.text()


def json_type_name(value: Any) -> str:
    """JsonTypeString, rapidjson's names for value kinds."""
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


_PY_TO_RAPIDJSON = (
    ("Expecting value", "Invalid value."),
    ("Expecting property name", "Missing a name for object member."),
    ("Expecting ':' delimiter", "Missing a colon after a name of object member."),
    ("Unterminated string", "Missing a closing quotation mark in string."),
    ("Invalid \\uXXXX escape", "Incorrect hex digit after \\u escape in string."),
    ("Invalid \\escape", "Invalid escape character in string."),
    ("Invalid control character", "Invalid encoding in string."),
)


def _enclosing_bracket(text: str, pos: int) -> str:
    # Python reports "Expecting ',' delimiter" for objects and arrays alike; rapidjson does not.
    stack: list[str] = []
    in_string = escaped = False
    for char in text[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else "{"


def _parse_error_text(error: json.JSONDecodeError) -> str:
    if error.msg.startswith("Expecting ',' delimiter"):
        if _enclosing_bracket(error.doc, error.pos) == "[":
            return "Missing a comma or ']' after an array element."
        return "Missing a comma or '}' after an object member."
    for python_text, rapidjson_text in _PY_TO_RAPIDJSON:
        if error.msg.startswith(python_text):
            return rapidjson_text
    return "Invalid value."


def parse_object(body: bytes) -> dict[str, Any]:
    """ParseJson: a top-level object, NaN/Infinity allowed, anything after it ignored."""
    if not body:
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_argument(
            f"JSON Parse error: Invalid encoding in string. at offset: {exc.start}"
        ) from exc
    start = len(text) - len(text.lstrip(" \t\n\r"))
    if start == len(text):
        raise invalid_argument(f"JSON Parse error: The document is empty. at offset: {start}")
    try:
        # raw_decode stops after the first value, like kParseStopWhenDoneFlag.
        document, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        offset = len(text[: exc.pos].encode("utf-8"))
        raise invalid_argument(
            f"JSON Parse error: {_parse_error_text(exc)} at offset: {offset}"
        ) from exc
    if not isinstance(document, dict):
        raise invalid_argument(f"JSON Value: {debug_string(document)} Is not object")
    return document


def error_body(message: str) -> str:
    """MakeJsonFromStatus: {"error": message}."""
    writer = PrettyWriter()
    writer.start_object()
    writer.key("error")
    writer.string(message)
    writer.end_object()
    return writer.text()
