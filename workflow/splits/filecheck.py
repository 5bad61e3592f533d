"""Every file a stage command is given, read once before the stage starts, and OS errors as one
line.

A damaged intermediate (a Parquet file cut short by a full disk or a copy, a JSON report with
half its text) would otherwise fail deep inside polars or pyarrow with a traceback that names no
file, and a rerun would fail the same way, since Snakemake sees a finished output.
:func:`check_inputs` reads every existing file among a command's arguments (the Snakemake rules
pass each input as an argument, and Snakemake removes a job's old outputs before it starts, so
these are the job's inputs): a Parquet file's footer and schema, a JSON file whole, any other
file's first byte. The first one that fails raises :class:`~splits.errors.InputError` with one
line: which file, what is wrong, and what to run: ``snakemake --forcerun <rule>`` with the rule
that made it (from Snakemake's record of the folder), or, for a file this folder's runs did not
make, to replace it. A file damaged past its footer passes; when the stage then fails with a
data error (polars, pyarrow, JSON), :func:`find_damaged` reads every input whole to name it.

:func:`os_error_line` words an ``OSError`` met while a stage runs (no space left on the device,
permission denied, a file too large) as one line naming the path and the cause.
"""

from __future__ import annotations

import errno
import json
import os
import re
from base64 import urlsafe_b64encode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from splits.errors import InputError

#: options whose values a stage writes (never checked: they are made, not read)
OUTPUT_DESTS = ("report", "summary", "pages")
#: read by their own code (SQLite caches, opened read-write; model folders)
SKIPPED_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".lock")
SNAKEMAKE_STATE = Path(".snakemake")
#: JSON files read whole by the check (larger ones are dumps, read by their own stage)
MAX_JSON_BYTES = 64 << 20
#: JSON lines (one object per line, a Pushshift dump named .json): two lines opening with "{"
JSON_LINES = re.compile(rb"(?:^|\n)\{[^\n]*\n\{")
#: files, never folders, in this pipeline
FILE_SUFFIXES = (".parquet", ".json")


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, str | os.PathLike):
        yield str(value)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _values(item)


def input_files(args: Any) -> list[Path]:
    """The existing regular files among the parsed arguments ``args`` (an argparse namespace),
    leaving out options that name outputs (``out*``, ``report``, ``summary``, ``pages``)."""
    found: list[Path] = []
    for dest, value in sorted(vars(args).items()):
        if dest.startswith("out") or dest in OUTPUT_DESTS:
            continue
        for text in _values(value):
            if len(text) > 4096 or "\n" in text or "\0" in text:
                continue  # a JSON spec or a text, not a path
            path = Path(text)
            try:
                if path.suffix in SKIPPED_SUFFIXES:
                    continue
                # a file, or a folder where a Parquet or JSON file belongs (check_file says so)
                if path.is_file() or (path.is_dir() and path.suffix in FILE_SUFFIXES):
                    found.append(path)
            except OSError:
                continue
    return list(dict.fromkeys(found))


def making_rule(path: str | Path, state: Path = SNAKEMAKE_STATE) -> str | None:
    """The Snakemake rule that made ``path`` in this folder (Snakemake's metadata record), or
    None where there is no record (a file the user gave, or another folder's). An absolute path
    is looked up relative to the current folder, as Snakemake recorded it."""
    if Path(path).is_absolute() and not Path(state).is_absolute():
        # Snakemake records the paths of the folder it ran in, relative to it
        try:
            path = Path(path).relative_to(Path.cwd())
        except ValueError:
            return None
    b64 = urlsafe_b64encode(os.path.normpath(str(path)).encode()).decode()
    try:
        max_len = os.pathconf(state / "metadata", "PC_NAME_MAX") or 255
    except OSError:
        return None
    parts = [b64[i : i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
    record = state / "metadata" / Path(*(["@" + s for s in parts[:-1]] + [parts[-1]]))
    try:
        return json.loads(record.read_text()).get("rule") or None
    except (OSError, ValueError, AttributeError):
        return None


def remedy(path: str | Path) -> str:
    """What to run to get a good ``path`` back."""
    rule = making_rule(path)
    if rule:
        return f"re-create it: snakemake --cores all --forcerun {rule}"
    return "replace it with a good copy (no run in this folder made it)"


def damaged(path: str | Path, what: str) -> InputError:
    return InputError(f"{path}: {what}; {remedy(path)}")


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def check_file(path: str | Path) -> None:
    """Read ``path`` as a stage would (see the module docstring); raise ``InputError``."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: {CAUSES[errno.EISDIR]}; {remedy(path)}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(1)
    except OSError as err:
        raise InputError(os_error_line(err, path)) from None
    name = path.name.lower()
    if name.endswith(".parquet"):
        if not head:
            raise damaged(path, "empty Parquet file (0 bytes)")
        # polars, which every stage imports anyway: pyarrow's Parquet reader costs a job ~0.1 CPU
        # s to import, and only a damaged file (damage_of) needs it
        import polars as pl

        try:
            pl.read_parquet_schema(path)
        except OSError as err:
            if getattr(err, "errno", None) is not None:
                raise InputError(os_error_line(err, path)) from None
            raise damaged(path, f"damaged Parquet file ({_short(err)})") from None
        except Exception as err:  # polars' ComputeError and kin: a damaged footer
            raise damaged(path, f"damaged Parquet file ({_short(err)})") from None
    elif name.endswith(".json") and path.stat().st_size <= MAX_JSON_BYTES:
        data = path.read_bytes()
        if JSON_LINES.search(data):  # a dump named .json: its stage counts bad lines itself
            return
        try:
            json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise damaged(path, f"damaged JSON file (not UTF-8 at byte {err.start})") from None
        except json.JSONDecodeError as err:
            raise damaged(
                path, f"damaged JSON file (line {err.lineno}, column {err.colno}: {err.msg})"
            ) from None


def check_inputs(args: Any) -> None:
    """:func:`check_file` on every file of :func:`input_files`."""
    for path in input_files(args):
        check_file(path)


def is_data_error(err: BaseException) -> bool:
    """An error a damaged file raises while it is read (polars, pyarrow, JSON, an OSError that
    carries no OS error number, as pyarrow's decompression errors do)."""
    if isinstance(err, OSError):
        return not err.errno
    if isinstance(err, ValueError | UnicodeError):  # JSONDecodeError is a ValueError
        return True
    module = type(err).__module__ or ""
    return module.startswith(("polars", "pyarrow"))


def find_damaged(args: Any) -> InputError | None:
    """After a stage failed with a data error that names no file: read every input file whole
    (Parquet one row group at a time) and return the one-line error of the first damaged one,
    None when all read (the failure is then not a damaged file's)."""
    for path in input_files(args):
        found = damage_of(path)
        if found is not None:
            return found
    return None


def damage_of(path: str | Path) -> InputError | None:
    """The one-line error of ``path`` read whole (:func:`check_file`, then a Parquet file one
    row group at a time), None when it reads."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        check_file(path)
        if path.name.lower().endswith(".parquet"):
            parquet = pq.ParquetFile(path)
            for group in range(parquet.num_row_groups):
                parquet.read_row_group(group)
    except InputError as err:
        return err
    except Exception as err:  # noqa: BLE001 - any failure to read it is its damage
        return damaged(path, f"damaged Parquet file ({_short(err)})")
    return None


CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for the file system or the process's file-size limit",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "is a directory, not a file",
    errno.EIO: "input/output error (a failing disk or network mount)",
    errno.EMFILE: "too many open files",
}


OS_ERROR_IN_TEXT = re.compile(r"\((?:os error|errno) (\d+)\)|\[errno (\d+)\]", re.IGNORECASE)


def os_errno(err: BaseException) -> int | None:
    """The OS error number of ``err``: an ``OSError``'s, or the one polars and pyarrow quote in
    their messages (``underlying IO error: No space left on device (os error 28)``)."""
    if isinstance(err, OSError) and err.errno:
        return err.errno
    found = OS_ERROR_IN_TEXT.search(str(err))
    return int(found.group(1) or found.group(2)) if found else None


def as_os_error(err: BaseException, path: str | Path) -> OSError | None:
    """``err`` as an ``OSError`` naming ``path`` (None when it is no OS error)."""
    code = os_errno(err)
    if code is None:
        return None
    return OSError(code, os.strerror(code), str(path))


def output_paths(args: Any) -> list[str]:
    """The values of the options that name outputs (``out*``, ``report``, ``summary``,
    ``pages``), for an error that names no file."""
    found: list[str] = []
    for dest, value in sorted(vars(args).items()):
        if dest.startswith("out") or dest in OUTPUT_DESTS:
            found.extend(_values(value))
    return found


def os_error_line(err: BaseException, path: str | Path | None = None, args: Any = None) -> str:
    """One line for an OS error (an ``OSError``, or a polars/pyarrow error quoting one): the path
    it concerns and the cause. An error that names no file (a write that ran out of space names
    none) is said to concern the command's outputs, from ``args``."""
    code = os_errno(err)
    where = path or getattr(err, "filename", None)
    cause = CAUSES.get(code or 0) or getattr(err, "strerror", None) or _short(err)
    if getattr(err, "filename2", None):
        where = f"{where} -> {err.filename2}"
    if where:
        return f"{where}: {cause}"
    outputs = output_paths(args) if args is not None else []
    return f"{cause} (while writing {', '.join(outputs)})" if outputs else cause
