"""The command line's input and output: reading CONNECTION_INFO, writing results and errors.

Every way this can fail (a closed or vanished stream, bytes that are not UTF-8, a number longer
than the interpreter converts, a file name holding control characters) becomes one
:class:`UsageError` line; nothing here lets a traceback reach the operator.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from virtdriver.errors import show


class UsageError(Exception):
    """Bad command-line input; reported in one line with exit 2."""


def shown_name(path: str) -> str:
    """A file name as it may be echoed to a terminal: quoted and escaped unless plain text."""
    return path if path.isprintable() and path.strip() == path and path else show(path)


def _read_bytes(path: str) -> bytes | str:
    if path != "-":
        with open(path, "rb") as f:
            return f.read()
    stdin = sys.stdin
    if stdin is None:
        raise UsageError("standard input is closed")
    buffer = getattr(stdin, "buffer", None)
    return buffer.read() if buffer is not None else stdin.read()


def load_connection_info(path: str) -> Any:
    """Read CONNECTION_INFO from a JSON file, or from standard input for ``-``.

    A file and standard input are read the same way: bytes, decoded as UTF-8 (a leading UTF-8
    byte-order mark is skipped), so the same bytes get the same answer from either.
    """
    name = "standard input" if path == "-" else shown_name(path)
    try:
        raw = _read_bytes(path)
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    except ValueError:  # a file name with NUL, or stdin closed underneath us
        raise UsageError(f"cannot read {name}: not a usable file name or stream") from None
    try:
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw.removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start})") from None
    import json  # (here: what prints no JSON and reads none, such as ``list``, never imports it)

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: not valid JSON: {exc.msg} (line {exc.lineno}, "
                         f"column {exc.colno})") from None
    except RecursionError:
        raise UsageError(f"{name}: JSON nested too deeply") from None
    except ValueError:  # a number longer than the interpreter converts
        raise UsageError(f"{name}: not usable JSON: a number has too many digits") from None


def as_json(value: Any, *, sort_keys: bool = False) -> str:
    """A command's result as indented JSON, for ``--json``."""
    import json

    return json.dumps(value, indent=2, sort_keys=sort_keys)


def read_volume(path: str, attach_mode: str | None = None,
                multiattach: bool = False) -> tuple[dict[str, Any], str]:
    """CONNECTION_INFO of any shape (:func:`virtdriver.shapes.normalize`) and the attach mode:
    ``--attach-mode`` if given, else an attachment record's own, else ``rw``; ``--multiattach``
    marks the volume multiattach."""
    from virtdriver.shapes import normalize

    info, mode = normalize(load_connection_info(path), attach_mode)
    if multiattach:
        info["multiattach"] = True
    return info, mode


def emit(text: str) -> None:
    """Write ``text`` and a newline to standard output.

    XML is written as it is on a UTF-8 output; on any other encoding characters it cannot carry
    become character references (still the same XML). A closed or vanished output is a usage
    failure of one line, not a traceback.
    """
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    say(text.encode(encoding, "xmlcharrefreplace").decode(encoding))
    finish_output()


def say(text: str) -> None:
    """Write one line of a command's output (a table's row, a message, JSON); an output that
    cannot be written (a full disk, a closed pipe) is one :class:`UsageError` line."""
    out = sys.stdout
    if out is None:
        raise UsageError("standard output is closed")
    try:
        out.write(text + "\n")
    except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
        raise UsageError(output_closed()) from None
    except OSError as exc:
        _silence_stdout()
        raise UsageError(f"cannot write to standard output: {exc.strerror or exc}") from None


def prepare_output() -> None:
    """Tables and messages on an output that is not UTF-8: escape what it cannot carry rather
    than fail half-way (XML from :func:`emit` is already written as character references)."""
    out = sys.stdout
    if out is not None and getattr(out, "errors", None) == "strict":
        try:
            out.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass  # not a text stream we can change (tests capture output): left as it is


def finish_output() -> None:
    """Flush what a command printed, so that a reader gone away is reported here in one line
    and not by the interpreter's last flush as a traceback."""
    out = sys.stdout
    if out is None:
        return
    try:
        out.flush()
    except (BrokenPipeError, ValueError):
        raise UsageError(output_closed()) from None
    except OSError as exc:
        _silence_stdout()
        raise UsageError(f"cannot write to standard output: {exc.strerror or exc}") from None


def flush_before_error() -> None:
    """Flush what a failing command printed before its error; an output that cannot take it is
    silenced, so that the error stays the one line said."""
    try:
        finish_output()
    except UsageError:
        pass


def output_closed() -> str:
    """Stop writing to an output whose reader is gone; the message that says so."""
    _silence_stdout()
    return "standard output is closed"


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null so the interpreter's final flush cannot fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (tests capture output): nothing left to flush


def fail(message: str) -> None:
    text = " ".join(message.split())
    if not text.isprintable():  # never echo escape sequences or other controls to a terminal
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    line = f"virtdriver: error: {text}\n"
    err = sys.stderr
    if err is None:
        return
    try:
        encoding = getattr(err, "encoding", None) or "utf-8"
        err.write(line.encode(encoding, "backslashreplace").decode(encoding))
        err.flush()
    except (OSError, ValueError):
        pass  # nowhere left to say it; the exit status still does
