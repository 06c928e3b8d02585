r"""Bounded reading of the JSON files a user hands over (model files, groups files): every load of such a file goes
through :func:`read_file` and :func:`loads`, which refuse, each in one line raised as the caller's error class:

* a file over the caller's size limit, from its size before it is opened (and by reading at most the limit plus
  one byte: a pipe or ``/dev/zero`` states no size);
* nesting deeper than ``max_depth``, from a scan of the brackets before parsing (deep nesting made the parser
  raise RecursionError, and under a raised recursion limit it could overflow the C stack);
* a number literal longer than ``MAX_NUMBER_CHARS`` (Python refuses to convert an integer of over 4,300 digits,
  and a float of a million digits is no value a model holds), one that overflows to infinity (``1e400``), and
  the non-standard literals ``NaN``, ``Infinity`` and ``-Infinity``: none of these files holds a non-finite value;
* a key given twice in one object (JSON parsers disagree on which one wins);
* a lone UTF-16 surrogate escape (``"\ud800"``: no character; printing or writing it fails later).

Value-level refusals name the key path of the value ("model.json: at params.alpha: NaN is not allowed ...").
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "read_file", "loads", "load_file", "key_path", "nesting_depth", "one_line"]

MAX_DEPTH = 32  # a model file nests 8 deep, a groups file 7
MAX_NUMBER_CHARS = 100  # a float written by repr has at most 24 characters; a count, at most 20 digits


class _Bad:
    """Stands in for a refused value while parsing, so that the refusal can name the value's key path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 1_000_000 else f"{n / 1e6:,.0f} MB"


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one printable line (control and bidirectional characters escaped), cut to ``limit`` characters:
    a message naming a value from a hostile file must not break the CLI's one line, or reorder it."""
    out = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def read_file(path, error: type[Exception], *, kind: str, max_bytes: int) -> str:
    """The text of the user's file ``path``; ``error(message)`` when it is missing, unreadable, over ``max_bytes``
    (checked from its size before it is opened), or not UTF-8. ``kind`` names it ("model file")."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"cannot read the {kind} {p}: file not found") from None
    except OSError as e:
        raise error(f"cannot read the {kind} {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p} is a folder, not a {kind}")
    if not stat.S_ISREG(st.st_mode):  # opening a FIFO waited for a writer (a hang); /dev/zero was read to the limit
        raise error(f"{p} is not a regular file (a device, FIFO or socket); give a {kind}")
    if st.st_size > max_bytes:  # before reading: a file this large is no file this tool wrote
        raise error(f"{p} is {_size(st.st_size)}; a {kind} is at most {_size(max_bytes)}")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)  # bounded: a pipe or a device states no size
    except FileNotFoundError:
        raise error(f"cannot read the {kind} {p}: file not found") from None
    except OSError as e:
        raise error(f"cannot read the {kind} {p}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise error(f"{p} holds more than {_size(max_bytes)}; a {kind} is at most {_size(max_bytes)}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{p} is not a text (JSON) {kind}: byte {e.start:,} is not UTF-8") from None


# A JSON string, or an unterminated one running to the end of the text. Possessive, and matching from every '"'
# it starts at, so that the scan is linear on any input (a backtracking pattern took quadratic time on '"\"\"\"...').
_STRING = re.compile(r'"(?:[^"\\]++|\\.|\\\Z)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 1 << 20


def nesting_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do not count), scanned
    without parsing; stops early once it exceeds ``stop_above``."""
    import numpy as np

    brackets = _STRING.sub("", text).encode("utf-8", "replace").translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):
        a = np.frombuffer(brackets, dtype=np.uint8, count=min(_CHUNK, len(brackets) - start), offset=start)
        steps = np.where((a == 0x5B) | (a == 0x7B), 1, -1).astype(np.int32)
        run = np.cumsum(steps, dtype=np.int64) + depth
        deepest = max(deepest, int(run.max()))
        depth = int(run[-1])
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def key_path(parts) -> str:
    """``params.alpha``, ``log[3][4][0]``; ``the top level`` for no parts."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return one_line(out, 200) or "the top level"


def _first_bad(doc, strings: bool) -> tuple[str, str] | None:
    """(key path, reason) of the first refused value in document order; with ``strings``, lone surrogates in
    keys and strings are refused too."""

    def lone(s: str) -> bool:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, _Bad):
            return key_path(path), obj.reason
        if strings and isinstance(obj, str) and lone(obj):
            return key_path(path), "a lone UTF-16 surrogate escape (\\ud800-\\udfff) is not a character"
        if isinstance(obj, dict):
            for k in reversed(list(obj)):
                if strings and lone(k):
                    return key_path(path), "a key holds a lone UTF-16 surrogate escape, which is not a character"
                stack.append((obj[k], (*path, k)))
        elif isinstance(obj, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(obj))))
    return None


def loads(text, where: str, error: type[Exception], *, kind: str, max_bytes: int, max_depth: int = MAX_DEPTH):
    """Parse the JSON ``text`` (str or bytes) of a user's file; ``error("{where}: ...")`` on anything refused (see
    the module docstring). ``where`` names the file in messages ("model.json", "group definitions")."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise error(f"{where}: {_size(len(text))}; a {kind} is at most {_size(max_bytes)}")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(f"{where}: not a text (JSON) {kind}: byte {e.start:,} is not UTF-8") from None
    if not isinstance(text, str):
        raise error(f"{where}: expected JSON text, got {type(text).__name__}")
    if len(text) > max_bytes:  # characters: at most the bytes they take
        raise error(f"{where}: over {_size(max_bytes)}; a {kind} is at most {_size(max_bytes)}")
    if text.startswith("\ufeff"):  # a byte-order mark some editors write
        text = text[1:]
    depth = nesting_depth(text, max_depth)
    if depth > max_depth:
        raise error(f"{where}: nested too deeply ({depth:,} levels or more; a {kind} has at most {max_depth})")
    refused = []

    def bad(reason: str) -> _Bad:
        b = _Bad(reason)
        refused.append(b)
        return b

    def constant(name: str):
        return bad(f"{name} is not allowed (every number must be finite)")

    def integer(s: str):
        if len(s) > MAX_NUMBER_CHARS:
            return bad(f"a number too long ({len(s):,} characters; at most {MAX_NUMBER_CHARS})")
        return int(s)

    def real(s: str):
        if len(s) > MAX_NUMBER_CHARS:
            return bad(f"a number too long ({len(s):,} characters; at most {MAX_NUMBER_CHARS})")
        v = float(s)
        return v if math.isfinite(v) else bad(f"the number {s} is out of range (every number must be finite)")

    def pairs(items: list):
        d = dict(items)
        if len(d) != len(items):
            seen: set = set()
            for k, _ in items:
                if k in seen:
                    return bad(f"the key {one_line(repr(k), 80)} appears twice in one object")
                seen.add(k)
        return d

    try:
        doc = json.loads(text, parse_constant=constant, parse_int=integer, parse_float=real, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except RecursionError:  # the depth scan above makes this unreachable for valid JSON; kept as a net
        raise error(f"{where}: nested too deeply") from None
    surrogates = "\\u" in text and re.search(r"\\u[dD][89a-fA-F]", text) is not None
    if refused or surrogates:
        found = _first_bad(doc, surrogates)
        if found is not None:
            raise error(f"{where}: at {found[0]}: {found[1]}")
    return doc


def load_file(path, error: type[Exception], *, kind: str, max_bytes: int, max_depth: int = MAX_DEPTH):
    """:func:`read_file` then :func:`loads`: the parsed JSON of the user's file ``path``."""
    text = read_file(path, error, kind=kind, max_bytes=max_bytes)
    return loads(text, os.fspath(path), error, kind=kind, max_bytes=max_bytes, max_depth=max_depth)
