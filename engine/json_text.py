"""JSON text read as data whatever it holds (standard library only): nesting deeper than the parser's recursion
limit is a ValueError, as any other malformed JSON is, so every reader's one-line error for a malformed file covers
it (the parser alone raises RecursionError, which no reader expects)."""
from __future__ import annotations

import json
import sys
from typing import IO, Any


def parse_json(text: str | bytes) -> Any:
    """The value of the JSON ``text``; ValueError for malformed JSON (``json.JSONDecodeError``), undecodable bytes
    (``UnicodeDecodeError``) and nesting too deep to parse."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"its arrays or objects nest deeper than {sys.getrecursionlimit()} levels, more than "
                         "any record of this project holds") from None


def load_json(f: IO) -> Any:
    """The value of the JSON file open as ``f`` (:func:`parse_json`)."""
    return parse_json(f.read())
