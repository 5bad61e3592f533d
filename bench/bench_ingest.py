"""Ingest benchmark: `splits ingest` against the physical limit of its work and against ConvoKit,
side by side in one run, on generated inputs of a given size: a ConvoKit corpus (its
utterances.jsonl), a Pushshift comments (RC_) NDJSON file, and that file compressed with zstd.

    python bench/bench_ingest.py --tiny             # seconds: the test suite's staleness check
    python bench/bench_ingest.py --mb 50            # quick check
    python bench/bench_ingest.py --mb 340           # the figures in docs/benchmarks.md

Per input, each command in its own process (its start included), repeated ``--repeats`` times
interleaved (stage, bare parse, bare parse-and-write, [with titles], [decompression], stage, ...)
so that a change in the machine's load falls on all of them alike; medians of wall and CPU
seconds:
- stage: ``splits ingest`` (parse, clean, titles, duplicates, Parquet out, report);
- bare parse: ``polars.scan_ndjson`` of the same file with the fields the stage reads (its
  schema), collected: the parse alone, no cleaning (the limit of the reading);
- bare parse + write: that scan streamed to Parquet with the stage's compression (zstd level
  1): the limit of the stage's whole job;
- bare parse + write + titles (ConvoKit only): that, and conversations.json's titles read
  with the stdlib's ``json.load`` in a thread beside it: the stage's output also carries each
  submission's title, so this is the limit of the whole job for a ConvoKit corpus (the
  stage/parse+write ratio leaves the titles out);
- decompression (``.zst`` only): the zstd stream decompressed and discarded (zstandard, the
  library the stage reads it with), the part of both that is not parsing;
then the ratios stage / bare (wall and CPU) and the stage's peak RSS.
ConvoKit (``convokit.Corpus(filename=...)`` of the ConvoKit corpus) stays beside them, run once:
it needs about 14x the file's size in memory, so above --convokit-max-mb (default: what fits in
a third of the available memory) it loads a smaller corpus made by the same generator
(--convokit-mb) and its time is scaled linearly by size (its import time, measured alone, not
scaled); such rows are marked "~".
The machine may be shared: the load average (``uptime``) is printed before and after; CPU
seconds say more than wall seconds when the machine is busy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from splits.config.settings import schema_defaults
from splits.ingest.parse import TYPED_SCHEMAS
from splits.ingest.settings import IngestSettings, SynthSettings
from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
BYTES_PER_POST = 470  # what the generator writes per utterance, measured
BYTES_PER_RC_POST = 260  # per comment in the Pushshift RC_ file, measured
TINY_MB = 2.0
# the bare operations, run as `python -c BARE schema path [out.parquet [conversations.json]]`:
# nothing of splits is imported; the schema is the stage's own (passed as JSON). With a
# conversations.json, its titles are read as well (the stage's output carries each submission's
# title): the plainest complete read, the stdlib's json.load into an (id, title) frame, in a
# thread beside the parse and write (polars releases the GIL), as the stage reads them beside
# its parse
BARE = r"""
import json, sys, threading
import polars as pl
def dtype(v):
    return pl.Struct({k: dtype(x) for k, x in v.items()}) if isinstance(v, dict) else getattr(pl, v)
def titles(path):
    with open(path, "rb") as fh:
        conversations = json.load(fh)
    pl.DataFrame({
        "conversation_id": list(conversations),
        "title": [(c.get("meta") or {}).get("title") for c in conversations.values()],
    }, schema={"conversation_id": pl.String, "title": pl.String})
schema = {k: dtype(v) for k, v in json.loads(sys.argv[1]).items()}
reader = threading.Thread(target=titles, args=sys.argv[4:5]) if len(sys.argv) > 4 else None
if reader:
    reader.start()
lf = pl.scan_ndjson(sys.argv[2], schema=schema)
if len(sys.argv) > 3:
    lf.sink_parquet(sys.argv[3], compression="zstd", compression_level=1)
else:
    lf.collect()
if reader:
    reader.join()
"""
DECOMPRESS = r"""
import sys, zstandard
with open(sys.argv[1], "rb") as fh:
    reader = zstandard.ZstdDecompressor(max_window_size=2**31).stream_reader(fh)
    while reader.read(1 << 24):
        pass
"""


def settings(cls: type, **overrides) -> str:
    """A stage's ``--settings`` value: the schema's defaults, the given values replaced (None
    keeps the default)."""
    values = {k: v for k, v in overrides.items() if v is not None}
    return json.dumps(dataclasses.asdict(schema_defaults(cls, **values)))


def run_measured(cmd: list[str], timeout: float | None = None) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MiB, return code, CPU seconds) of a subprocess."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = None if timeout is None else start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline and time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            return float("inf"), usage.ru_maxrss / 1024, -9, float("inf")
        time.sleep(0.01)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(proc.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, code, usage.ru_utime + usage.ru_stime


def available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 4096.0


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def load_convokit(corpus: Path, timeout: float) -> tuple[float, float, float]:
    load = f"from convokit import Corpus; Corpus(filename={str(corpus)!r})"
    wall, rss, code, cpu = run_measured([sys.executable, "-c", load], timeout=timeout)
    if code != 0:
        return float("nan"), rss, float("nan")
    return wall, rss, cpu


def synth(root: Path, posts: int, fmt: str) -> None:
    cmd = [
        sys.executable, "-m", "splits.cli", "synth",
        "--demographics", str(REPO / "config/demographics.sample.yaml"),
        "--topics", str(REPO / "config/topics.yaml"),
        "--out", str(root / "corpus"), "--truth-dir", str(root / "truth"),
        "--settings", settings(SynthSettings, posts=posts, shards=1, format=fmt),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_corpus(root: Path, mb: float) -> Path:
    """A generated ConvoKit corpus whose utterances.jsonl has about ``mb`` MB."""
    synth(root, max(int(mb * 1e6 / BYTES_PER_POST), 2000), "convokit")
    return root / "corpus" / "sample-0"


def make_rc(root: Path, mb: float) -> Path:
    """A generated Pushshift comments file (RC_) of about ``mb`` MB."""
    synth(root, max(int(mb * 1e6 / BYTES_PER_RC_POST), 2000), "pushshift")
    return root / "corpus" / "RC_sample-0.ndjson"


def compress_zst(path: Path) -> Path:
    import zstandard

    out = path.with_name(path.name + ".zst")
    with open(path, "rb") as src, open(out, "wb") as dst:
        zstandard.ZstdCompressor(level=3).copy_stream(src, dst)
    return out


def schema_json(fmt: str) -> str:
    def name(dtype) -> object:
        if hasattr(dtype, "fields"):
            return {f.name: name(f.dtype) for f in dtype.fields}
        return str(dtype.base_type() if hasattr(dtype, "base_type") else dtype)

    return json.dumps({k: name(v) for k, v in TYPED_SCHEMAS[fmt].items()})


@dataclasses.dataclass
class Input:
    label: str
    fmt: str  # the stage's parse schema
    stage_input: Path  # what `splits ingest --input` gets
    ndjson: Path  # the NDJSON file the bare operations read (the same bytes)
    compressed: bool = False
    titles: Path | None = None  # a ConvoKit corpus's conversations.json (its titles)

    @property
    def mb(self) -> float:
        return self.ndjson.stat().st_size / 1e6


def measure_input(item: Input, work: Path, repeats: int, chunk_mb: float | None) -> dict:
    """Interleaved repeats of the stage and the bare operations; medians and the stage's RSS."""
    report = work / f"{item.label}.json"
    commands = {
        "stage": [
            sys.executable, "-m", "splits.cli", "ingest", "--input", str(item.stage_input),
            "--out", str(work / f"{item.label}.stage.parquet"), "--report", str(report),
            "--settings", settings(IngestSettings, chunk_mb=chunk_mb),
        ],
        "parse": [sys.executable, "-c", BARE, schema_json(item.fmt), str(item.ndjson)],
        "parse+write": [
            sys.executable, "-c", BARE, schema_json(item.fmt), str(item.ndjson),
            str(work / f"{item.label}.bare.parquet"),
        ],
    }  # fmt: skip
    if item.titles is not None:
        commands["parse+write+titles"] = [*commands["parse+write"], str(item.titles)]
    if item.compressed:
        commands["decompress"] = [sys.executable, "-c", DECOMPRESS, str(item.ndjson)]
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    for _ in range(repeats):
        for name, cmd in commands.items():
            wall, rss, code, cpu = run_measured(cmd)
            if code != 0:
                raise SystemExit(f"{item.label}: {name} failed ({code})")
            runs[name].append((wall, cpu, rss))
    medians = {
        name: tuple(statistics.median(r[i] for r in rs) for i in range(3))
        for name, rs in runs.items()
    }
    posts = json.loads(report.read_text())["posts"]
    return {"medians": medians, "runs": runs, "posts": posts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=340.0, help="size of each NDJSON input")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each command")
    parser.add_argument(
        "--inputs",
        nargs="+",
        choices=["convokit", "pushshift", "pushshift-zst"],
        default=["convokit", "pushshift", "pushshift-zst"],
    )
    parser.add_argument(
        "--chunk-mb", type=float, help="bytes parsed per chunk (default: ingest.chunk_mb)"
    )
    parser.add_argument("--no-convokit", action="store_true", help="leave out the ConvoKit peer")
    parser.add_argument("--convokit-timeout", type=float, default=3600)
    parser.add_argument(
        "--convokit-max-mb",
        type=float,
        default=None,
        help="largest corpus ConvoKit loads itself (default: available memory / 3 / 14)",
    )
    parser.add_argument(
        "--convokit-mb", type=float, default=100, help="size ConvoKit loads above that"
    )
    parser.add_argument("--workdir", default=None, help="where inputs go (default: a temp dir)")
    args = parse_args(parser, mb=TINY_MB, repeats=1, convokit_mb=TINY_MB)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ingest."))
    try:
        return run(args, base)
    finally:
        if not args.workdir:
            shutil.rmtree(base, ignore_errors=True)


def run(args: argparse.Namespace, base: Path) -> int:
    inputs: list[Input] = []
    if "convokit" in args.inputs:
        corpus = make_corpus(base / "convokit", args.mb)
        inputs.append(
            Input(
                "convokit",
                "convokit",
                corpus,
                corpus / "utterances.jsonl",
                titles=corpus / "conversations.json",
            )
        )
    if {"pushshift", "pushshift-zst"} & set(args.inputs):
        rc = make_rc(base / "pushshift", args.mb)
        if "pushshift" in args.inputs:
            inputs.append(Input("pushshift", "pushshift", rc, rc))
        if "pushshift-zst" in args.inputs:
            zst = compress_zst(rc)
            inputs.append(Input("pushshift-zst", "pushshift", zst, zst, compressed=True))
    work = base / "out"
    work.mkdir(exist_ok=True)
    print(f"{os.cpu_count()} CPUs, {load_average()}; {args.repeats} interleaved runs, medians")
    header = (
        f"{'input':<14} {'MB':>6} {'posts':>9} | {'stage s':>7} {'cpu':>6} {'RSS MiB':>7} |"
        f" {'parse s':>7} {'cpu':>6} | {'parse+write s':>13} {'cpu':>6} | {'decompress s':>12}"
        f" {'cpu':>5} | {'stage/parse':>11} {'stage/parse+write':>17} {'(cpu)':>6}"
    )
    print(header)
    stage_wall: dict[str, float] = {}
    for item in inputs:
        result = measure_input(item, work, args.repeats, args.chunk_mb)
        m = result["medians"]
        (s_wall, s_cpu, s_rss), (p_wall, p_cpu, _), (w_wall, w_cpu, _) = (
            m["stage"],
            m["parse"],
            m["parse+write"],
        )
        d_wall, d_cpu, _ = m.get("decompress", (float("nan"),) * 3)
        stage_wall[item.label] = s_wall
        print(
            f"{item.label:<14} {item.mb:6.1f} {result['posts']:9d} | {s_wall:7.2f} {s_cpu:6.2f}"
            f" {s_rss:7.0f} | {p_wall:7.2f} {p_cpu:6.2f} | {w_wall:13.2f} {w_cpu:6.2f} |"
            f" {d_wall:12.2f} {d_cpu:5.2f} | {s_wall / p_wall:10.2f}x {s_wall / w_wall:16.2f}x"
            f" {s_cpu / w_cpu:5.2f}x",
            flush=True,
        )
        if "parse+write+titles" in m:
            t_wall, t_cpu, _ = m["parse+write+titles"]
            print(
                f"    {item.label}: bare parse+write with conversations.json's titles (json.load)"
                f" {t_wall:.2f} s, {t_cpu:.2f} CPU s; stage/(parse+write+titles)"
                f" {s_wall / t_wall:.2f}x wall, {s_cpu / t_cpu:.2f}x CPU",
                flush=True,
            )
        for name, rs in result["runs"].items():
            walls = " ".join(f"{r[0]:.2f}" for r in rs)
            print(f"    {name:<18} wall runs: {walls}")
    if not args.no_convokit and "convokit" in args.inputs:
        convokit_row(args, base, inputs[0], stage_wall["convokit"])
    print(f"at the end: {load_average()}")
    return 0


def convokit_row(args: argparse.Namespace, base: Path, item: Input, stage_s: float) -> None:
    """ConvoKit loading the same corpus (or a smaller one, its time scaled: see the docstring)."""
    max_ck = args.convokit_max_mb or available_mb() / 3 / 14
    size = item.mb
    mark = " "
    if size <= max_ck:
        t_ck, rss_ck, cpu_ck = load_convokit(item.stage_input, args.convokit_timeout)
    else:
        small = make_corpus(base / "convokit-small", args.convokit_mb)
        small_size = (small / "utterances.jsonl").stat().st_size / 1e6
        t_imp, _, _, cpu_imp = run_measured([sys.executable, "-c", "import convokit"])
        t_small, rss_ck, cpu_small = load_convokit(small, args.convokit_timeout)
        t_ck = t_imp + (t_small - t_imp) * size / small_size
        cpu_ck = cpu_imp + (cpu_small - cpu_imp) * size / small_size
        mark = "~"
    print(
        f"ConvoKit Corpus load of the convokit input: {mark}{t_ck:.2f} s wall, {cpu_ck:.2f} s CPU,"
        f" {rss_ck:.0f} MiB RSS; {t_ck / stage_s:.1f}x the stage's wall time"
    )


if __name__ == "__main__":
    sys.exit(main())
