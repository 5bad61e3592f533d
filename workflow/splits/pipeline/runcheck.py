"""``splits check RUNDIR``: read every output of a finished run and name each damaged one with the
command that re-creates it.

Snakemake decides what to re-run from file times, so an output damaged after it was written (cut
by a full disk or a copy, edited, half-synced) with its time kept is never noticed by a rerun:
the run says "Nothing to be done" and the next reader fails. This command reads, under the run's
outdir:

- every file: a Parquet file's footer and schema and then every row group, a JSON file whole
  (JSON lines line by line), a PNG image's signature and its closing IEND chunk, any other file
  to its end (and as UTF-8 when it is text);
- every file a job read that Snakemake recorded a checksum of (its inputs under 1 MB): bytes that
  differ from the record while the file's time is not newer than the job that read them are a
  change no rerun will see;
- every file the run's default target needs (from the config, as the Snakefile lists them) and
  every input of a job whose output is still there: a missing one is named too;
- Snakemake's marks of outputs whose job was stopped while it wrote them
  (``.snakemake/incomplete``).

Which rule made a file comes from Snakemake's own record of the folder (``.snakemake/metadata``,
the record the stage commands use to name a damaged input: :mod:`splits.filecheck`); a file with
no record is named with the target that makes it.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import hashlib
import json
import os
import shlex
from base64 import urlsafe_b64decode
from dataclasses import dataclass
from pathlib import Path

from splits.errors import ConfigError
from splits.filecheck import SKIPPED_SUFFIXES, damage_of, os_error_line, remedy

#: what ends every PNG image (the IEND chunk and its CRC)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"
#: files whose text must be UTF-8 (the pipeline writes them so)
TEXT_SUFFIXES = (".csv", ".tsv", ".md", ".html", ".txt", ".yaml", ".yml", ".ndjson", ".jsonl")
#: Snakemake's mark of a directory output (its time, no data)
TIMESTAMP = ".snakemake_timestamp"
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Damage:
    """One damaged output: its path (relative to the run folder, as Snakemake records it), what
    is wrong with it and the rule that made it (None without a record)."""

    path: str
    what: str
    rule: str | None
    fix: str


# --------------------------------------------------------------------------- Snakemake's records


def _recorded(root: Path):
    """(path, record file) of each record under ``root`` (``.snakemake/metadata`` or
    ``.snakemake/incomplete``): a record file's name is the urlsafe base64 of the output's path
    (relative to the run folder), cut into folders named ``@<part>`` when it is long."""
    if not root.is_dir():
        return
    for record in root.rglob("*"):
        if not record.is_file():
            continue
        encoded = "".join(part.removeprefix("@") for part in record.relative_to(root).parts)
        try:
            yield os.path.normpath(urlsafe_b64decode(encoded).decode("utf-8")), record
        except ValueError:
            continue  # not a record (Snakemake's own marks, e.g. a migration under way)


def read_records(rundir: Path) -> dict[str, dict]:
    """Snakemake's metadata records of ``rundir``: output path -> the job's record (rule, input,
    input_checksums, starttime)."""
    records: dict[str, dict] = {}
    for path, record in _recorded(rundir / ".snakemake" / "metadata"):
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue  # a record cut short: nothing to learn from it
        if isinstance(data, dict):
            records[path] = data
    return records


def incomplete_outputs(rundir: Path) -> set[str]:
    """The outputs Snakemake marked incomplete in ``rundir``: a job was stopped (or is still
    running) while it wrote them."""
    return {path for path, _ in _recorded(rundir / ".snakemake" / "incomplete")}


def expected_outputs(rundir: Path, configfile: Path) -> tuple[str, list[str]]:
    """The run's outdir and the files its default target makes (``rule all`` of the Snakefile:
    ``final_targets`` and their report pages), from ``configfile`` read as the run read it (its
    relative paths are the run folder's)."""
    from splits.config.schema import load_config
    from splits.pipeline.targets import final_targets
    from splits.report.tables import report_pages

    with contextlib.chdir(rundir):
        config = load_config(configfile)
        empathy = config["probes"]["empathy"]
        sets = {"topics": empathy["group_sets"], "envent": empathy["envent_group_sets"]}
        finals = final_targets(config, sets)
        targets = finals + report_pages(finals, config["outdir"])
    return os.path.normpath(config["outdir"]), [os.path.normpath(t) for t in targets]


# --------------------------------------------------------------------------- reading a file


def _read_to_end(path: Path, text: bool) -> str | None:
    decoder = codecs.getincrementaldecoder("utf-8")() if text else None
    offset = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_CHUNK):
            if decoder is not None:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as err:
                    return f"not UTF-8 text at byte {offset + err.start}"
            offset += len(chunk)
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return "not UTF-8 text: it ends inside a character (cut short)"
    return None


def _png_damage(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(len(PNG_SIGNATURE))
        fh.seek(max(0, size - len(PNG_END)))
        tail = fh.read()
    if head != PNG_SIGNATURE:
        return "damaged PNG image (no PNG signature)"
    if tail != PNG_END:
        return "damaged PNG image (no end chunk: cut short)"
    return None


def _jsonl_damage(path: Path) -> str | None:
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    json.loads(line)
                except ValueError as err:
                    return f"damaged JSON lines file (line {number}: {err})"
    return None


def file_damage(path: Path) -> str | None:
    """What is wrong with ``path`` read whole (None when it reads)."""
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".json")):
            found = damage_of(path)
            if found is None:
                return None
            # damage_of's line is "<path>: <what>[; <remedy>]": the what alone (the remedy
            # named there is the current folder's; this command names the run folder's)
            line = str(found).removeprefix(f"{path}: ")
            return line.removesuffix(f"; {remedy(path)}")
        if path.stat().st_size == 0 and name != TIMESTAMP:
            return "empty file (0 bytes)"
        if name.endswith(".png"):
            return _png_damage(path)
        if name.endswith(".jsonl"):
            return _jsonl_damage(path)
        return _read_to_end(path, text=name.endswith(TEXT_SUFFIXES))
    except UnicodeDecodeError as err:
        return f"not UTF-8 text at byte {err.start}"
    except OSError as err:
        return os_error_line(err).split(": ", 1)[-1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- the check


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _making_rule(path: str, records: dict[str, dict]) -> str | None:
    """The rule of ``path``'s record, or of the directory output holding it."""
    while path not in records:
        parent = os.path.dirname(path)
        if not parent or parent == path:
            return None
        path = parent
    return records[path].get("rule") or None


def _fix(path: str, rule: str | None, snakemake: str, missing: bool) -> str:
    """A missing file is made by naming it (Snakemake does not re-make a deleted intermediate
    while the outputs made from it are current); a damaged one by re-running the rule that made
    it and what was made from it, or, without a record, by forcing its own target."""
    if missing:
        return f"{snakemake} {shlex.quote(path)}"
    if rule:
        return f"{snakemake} --forcerun {rule}"
    return f"{snakemake} --force {shlex.quote(path)}"


def check_run(
    rundir: Path, configfile: Path, snakemake: str = "snakemake --cores all"
) -> tuple[int, list[Damage]]:
    """(files read, damaged outputs) of the run in ``rundir``; each damage's fix is a
    ``snakemake`` command line (the command and its options, run in ``rundir``)."""
    records = read_records(rundir)
    outdir, targets = expected_outputs(rundir, configfile)
    if not (rundir / outdir).is_dir():
        raise ConfigError(
            f"{rundir / outdir} does not exist: the config's outdir holds no run "
            "(give the folder Snakemake ran in, and its --configfile)"
        )
    found: dict[str, str] = {}

    # paths as Snakemake records them: relative to the run folder, or absolute for an absolute
    # outdir
    present = sorted(
        os.path.normpath(p if Path(outdir).is_absolute() else p.relative_to(rundir))
        for p in (rundir / outdir).rglob("*")
        if p.is_file() and p.suffix not in SKIPPED_SUFFIXES
    )
    for path in present:
        what = file_damage(rundir / path)
        if what:
            found[path] = what

    # files a job read whose bytes changed while their time did not (no rerun sees it)
    digests: dict[str, str] = {}
    for output, record in records.items():
        if not (rundir / output).exists():
            continue  # a record of an output no longer there: its reads say nothing now
        started = record.get("starttime") or 0
        for read, checksum in (record.get("input_checksums") or {}).items():
            read = os.path.normpath(read)
            file = rundir / read
            if read in found or not _under(read, outdir) or not file.is_file():
                continue
            if file.stat().st_mtime > started or not str(checksum).startswith("sha256:"):
                continue  # newer than the job: Snakemake re-runs the job itself
            if read not in digests:
                digests[read] = _sha256(file)
            if digests[read] != checksum.removeprefix("sha256:"):
                found[read] = (
                    f"changed after rule {record.get('rule')} read it (its bytes differ from "
                    "Snakemake's record and its time does not show it)"
                )

    # missing: a file the default target needs, or an input of an output still there
    needed = set(targets)
    for output, record in records.items():
        if (rundir / output).exists():
            needed.update(os.path.normpath(i) for i in record.get("input") or [])
    for path in sorted(needed):
        if _under(path, outdir) and path not in found and not (rundir / path).exists():
            found[path] = "missing"

    damages = []
    for path, what in sorted(found.items()):
        rule = _making_rule(path, records)
        missing = what == "missing"
        if missing and rule:
            what = f"missing (made by rule {rule})"
        damages.append(Damage(path, what, rule, _fix(path, rule, snakemake, missing)))
    # a job stopped while writing: Snakemake refuses its outputs until they are re-run
    for output in sorted(incomplete_outputs(rundir)):
        if _under(output, outdir) and output not in found:
            damages.append(
                Damage(
                    output,
                    "marked incomplete by Snakemake (its job was stopped, or is running now)",
                    _making_rule(output, records),
                    f"{snakemake} --rerun-incomplete",
                )
            )
    return len(present), damages


# --------------------------------------------------------------------------- the command


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "rundir",
        nargs="?",
        default=".",
        help="the folder Snakemake ran in, holding .snakemake/ and the outdir (default: here)",
    )
    parser.add_argument(
        "--configfile",
        help="the run's config, relative to RUNDIR as Snakemake was given it "
        "(default: config/config.yaml); its outdir and default target are read",
    )
    parser.add_argument(
        "--cores", default="all", help="the --cores of the commands printed (default: all)"
    )


def run(args: argparse.Namespace) -> int:
    rundir = Path(args.rundir)
    if not rundir.is_dir():
        raise ConfigError(f"{rundir}: no such folder (give the folder Snakemake ran in)")
    configfile = Path(args.configfile) if args.configfile else Path("config/config.yaml")
    if not (rundir / configfile).is_file():
        raise ConfigError(
            f"{rundir / configfile}: no such file (give the run's config with --configfile)"
        )
    snakemake = f"snakemake --cores {shlex.quote(args.cores)}"
    if args.configfile:  # the run's own config, or Snakemake would plan config/config.yaml's
        snakemake += f" --configfile {shlex.quote(args.configfile)}"
    read, damages = check_run(rundir, configfile, snakemake)
    here = Path.cwd().resolve() == rundir.resolve()
    prefix = "" if here else f"cd {shlex.quote(str(rundir))} && "
    for damage in damages:
        print(f"{damage.path}: {damage.what}; re-create it: {prefix}{damage.fix}")
    if not damages:
        print(f"splits check: {read} files of the run in {rundir} read; none is damaged")
        return 0
    rules = sorted({d.rule for d in damages if d.rule and "--forcerun" in d.fix})
    all_fix = f" (all of them: {prefix}{snakemake} --forcerun {' '.join(rules)})"
    print(
        f"splits check: {len(damages)} of the run's files damaged or missing"
        + (all_fix if len(rules) > 1 else "")
    )
    return 1
