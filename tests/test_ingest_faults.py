"""Ingest of damaged input (docs/method.md §2.1): every record read is kept or counted under its reason,
or the shard stops with one line naming the file; never a traceback, never an uncounted record.

Corpora: the real r/Cornell ConvoKit corpus (../shared/reference; skipped where absent) as
ConvoKit and converted to Pushshift RC_ NDJSON, and generated corpora in both formats (some
lines longer than the smallest chunk). Each fault is applied to the record file, ingested at
several chunk sizes, and compared with the clean run: the rows kept must be the clean run's rows
minus exactly the damaged records, and the report's counts the clean counts plus the fault.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import lzma
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from splits.cli import main as splits_main
from splits.config.definitions import load_demographics, load_topics
from splits.config.settings import schema_defaults
from splits.errors import InputError
from splits.ingest.bots import load_bot_list
from splits.ingest.clean import REASONS
from splits.ingest.merge import merge
from splits.ingest.read import ingest_shard
from splits.ingest.settings import IngestSettings, SynthSettings
from splits.ingest.synth.generate import generate
from splits.ingest.synth.world import SynthParams

REPO = Path(__file__).resolve().parents[1]
CORNELL = REPO.parent / "shared" / "reference" / "realdata" / "convokit_cornell"
BOTS = load_bot_list(REPO / "resources" / "bots.txt")
# 16 MiB: the whole file in one chunk; 0.01 MiB; 0.004 MiB = 4 KiB, shorter than some lines
CHUNK_MB = (16, 0.01, 0.004)
LONG_TEXT = "a long line of text that goes on " * 200  # ~6.6 KB, longer than a 4 KiB chunk

INGEST = schema_defaults(IngestSettings)
INGEST_JSON = json.dumps(dataclasses.asdict(INGEST))


# --------------------------------------------------------------------------- corpora


@dataclass
class Corpus:
    """An input whose record file (utterances.jsonl or the RC_ file) can be rewritten."""

    root: Path  # what is given to ingest (a ConvoKit directory, or the NDJSON file)
    records: Path  # the file holding the records
    fmt: str  # convokit | pushshift

    def lines(self) -> list[bytes]:
        return self.records.read_bytes().splitlines(keepends=True)

    def with_records(self, data: bytes, dest: Path, name: str | None = None) -> Path:
        """A copy of the input whose record file holds ``data``; returns what to ingest."""
        dest.mkdir(parents=True, exist_ok=True)
        if self.fmt == "pushshift":
            path = dest / (name or self.records.name)
            path.write_bytes(data)
            return path
        target = dest / (name or self.root.name)
        target.mkdir()
        for f in self.root.iterdir():
            if f.name != "utterances.jsonl":
                (target / f.name).write_bytes(f.read_bytes())
        (target / "utterances.jsonl").write_bytes(data)
        return target


def _cornell_convokit(dest: Path) -> Corpus:
    if not CORNELL.is_dir():
        pytest.skip(f"reference corpus {CORNELL} is absent (it is only present in CI)")
    d = dest / "cornell"
    d.mkdir()
    for f in CORNELL.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return Corpus(d, d / "utterances.jsonl", "convokit")


def cornell_as_pushshift(src: Path, dest: Path) -> tuple[Path, Path]:
    """The Cornell utterances as Pushshift RS_ (submissions, titles from conversations.json)
    and RC_ (comments, t3_/t1_ links) NDJSON files."""
    titles = {
        k: v["meta"].get("title")
        for k, v in json.loads((src / "conversations.json").read_text()).items()
    }
    rs, rc = [], []
    for line in (src / "utterances.jsonl").read_text(encoding="utf-8").splitlines():
        u = json.loads(line)
        common = {
            "id": u["id"],
            "author": u["speaker"],
            "subreddit": u["meta"]["subreddit"],
            "created_utc": u["timestamp"],
            "score": u["meta"]["score"],
        }
        if u["id"] == u["conversation_id"]:
            rs.append({**common, "title": titles[u["id"]], "selftext": u["text"]})
        else:
            parent = u["reply-to"]
            prefix = "t3_" if parent == u["conversation_id"] else "t1_"
            rc.append(
                {
                    **common,
                    "body": u["text"],
                    "parent_id": prefix + parent,
                    "link_id": "t3_" + u["conversation_id"],
                }
            )
    dest.mkdir(parents=True, exist_ok=True)
    paths = dest / "RS_cornell.ndjson", dest / "RC_cornell.ndjson"
    for path, rows in zip(paths, (rs, rc), strict=True):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def _cornell_pushshift(dest: Path) -> Corpus:
    if not CORNELL.is_dir():
        pytest.skip(f"reference corpus {CORNELL} is absent (it is only present in CI)")
    _, rc = cornell_as_pushshift(CORNELL, dest / "cornell-ps")
    return Corpus(rc, rc, "pushshift")


def _generated(dest: Path, fmt: str, n_lines: int = 1200) -> Corpus:
    """A generated corpus cut to its first ``n_lines`` records, every 97th text made longer
    than a 4 KiB chunk."""
    out = dest / f"gen-{fmt}"
    generate(
        SynthParams.from_settings(
            schema_defaults(SynthSettings, posts=1000, shards=1, format=fmt, seed=7)
        ),
        load_demographics(REPO / "config" / "demographics.sample.yaml"),
        load_topics(REPO / "config" / "topics.yaml"),
        out / "corpus",
        out / "truth",
    )
    if fmt == "convokit":
        root = out / "corpus" / "sample-0"
        records = root / "utterances.jsonl"
        key = "text"
    else:
        root = records = out / "corpus" / "RC_sample-0.ndjson"
        key = "body"
    lines = records.read_text(encoding="utf-8").splitlines()[:n_lines]
    rows = [json.loads(x) for x in lines]
    for i in range(0, len(rows), 97):
        rows[i][key] = LONG_TEXT + rows[i][key]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return Corpus(root, records, fmt)


CORPORA: dict[str, Callable[[Path], Corpus]] = {
    "cornell-convokit": _cornell_convokit,
    "cornell-pushshift": _cornell_pushshift,
    "generated-convokit": lambda d: _generated(d, "convokit"),
    "generated-pushshift": lambda d: _generated(d, "pushshift"),
}


# --------------------------------------------------------------------------- helpers


def ingest(path: Path, out: Path, chunk_mb: float | None = None) -> tuple[dict, pl.DataFrame]:
    """Ingest with the schema's settings, ``chunk_mb`` replaced where given."""
    settings = INGEST if chunk_mb is None else schema_defaults(IngestSettings, chunk_mb=chunk_mb)
    report = ingest_shard(path, out / "posts.parquet", out / "report.json", settings, bots=BOTS)
    return report, pl.read_parquet(out / "posts.parquet")


def record_id(line: bytes) -> str:
    return json.loads(line)["id"]


def counts(report: dict) -> dict[str, int]:
    return {**report["dropped"], "blank_lines": report["blank_lines"]}


def plus(base: dict[str, int], **extra: int) -> dict[str, int]:
    out = dict(base)
    for key, n in extra.items():
        key = key.replace("__", ":")
        out[key] = out.get(key, 0) + n
    return out


def by_id(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["post_id"]: r for r in frame.iter_rows(named=True)}


def cli_one_line_error(argv: list[str], capsys) -> str:
    """Run ``splits`` in process; it must fail with exactly one line on stderr."""
    rc = splits_main(argv)
    captured = capsys.readouterr()
    err_lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc != 0
    assert "Traceback" not in captured.err + captured.out
    assert len(err_lines) == 1, captured.err
    return err_lines[0]


def _clean_run(corpus: Corpus, base: Path) -> dict:
    """The clean run of the corpus, with a kept comment moved to the last line (so that
    cutting the last line damages a record the clean run keeps)."""
    lines = corpus.lines()
    probe_report, probe_rows = ingest(corpus.root, base / "probe")
    kept = set(probe_rows.filter(pl.col("kind") == "comment")["post_id"].to_list())
    kept_lines = [i for i, ln in enumerate(lines) if record_id(ln) in kept]
    last = kept_lines[len(kept_lines) // 2]
    lines = lines[:last] + lines[last + 1 :] + [lines[last]]
    data = b"".join(lines)
    path = corpus.with_records(data, base / "input")
    report, rows = ingest(path, base / "clean")
    assert report["posts"] == probe_report["posts"] and rows.height == probe_rows.height
    kept_lines = [i for i, ln in enumerate(lines) if record_id(ln) in kept]
    victim = kept_lines[len(kept_lines) // 3]
    return {
        "data": data,
        "lines": lines,
        "report": report,
        "rows": rows,
        "victim": victim,
        "victim_id": record_id(lines[victim]),
        "last_id": record_id(lines[-1]),
        "author_key": "speaker" if corpus.fmt == "convokit" else "author",
    }


_PREPARED: dict[str, tuple[Corpus, dict]] = {}


def _prepared(name: str, tmp_path_factory) -> tuple[Corpus, dict]:
    """(corpus, its clean run), built once per test session."""
    if name not in _PREPARED:
        corpus = CORPORA[name](tmp_path_factory.mktemp(name))
        _PREPARED[name] = corpus, _clean_run(corpus, tmp_path_factory.mktemp(f"{name}-clean"))
    return _PREPARED[name]


@pytest.fixture(params=sorted(CORPORA))
def case(request, tmp_path_factory) -> tuple[Corpus, dict]:
    return _prepared(request.param, tmp_path_factory)


@pytest.fixture(params=sorted(n for n in CORPORA if n.endswith("pushshift")))
def pushshift_case(request, tmp_path_factory) -> tuple[Corpus, dict]:
    return _prepared(request.param, tmp_path_factory)


@pytest.fixture(params=sorted(n for n in CORPORA if n.endswith("convokit")))
def convokit_case(request, tmp_path_factory) -> tuple[Corpus, dict]:
    return _prepared(request.param, tmp_path_factory)


def _replace_line(lines: list[bytes], i: int, new: bytes) -> bytes:
    return b"".join(lines[:i] + [new] + lines[i + 1 :])


def _without_key(line: bytes, key: str) -> bytes:
    obj = json.loads(line)
    del obj[key]
    return (json.dumps(obj) + "\n").encode()


def _invalid_utf8(line: bytes) -> bytes:
    cut = line.index(b'"id"')
    return line[:cut] + b'"x": "\xff\xfe", ' + line[cut:]


# each fault: (bytes of the damaged record file, ids no longer kept, expected extra counts)
FAULTS = {
    "truncated_last_line": lambda c: (
        c["data"][: -(len(c["lines"][-1]) // 2)],
        {c["last_id"]},
        {"malformed_json": 1},
    ),
    "last_line_without_newline": lambda c: (c["data"].rstrip(b"\n"), set(), {}),
    "lone_trailing_space": lambda c: (c["data"] + b" ", set(), {"blank_lines": 1}),
    "trailing_blank_lines": lambda c: (c["data"] + b"\n \n\t\n", set(), {"blank_lines": 3}),
    "invalid_utf8": lambda c: (
        _replace_line(c["lines"], c["victim"], _invalid_utf8(c["lines"][c["victim"]])),
        {c["victim_id"]},
        {"invalid_utf8": 1},
    ),
    "duplicated_record": lambda c: (
        b"".join(c["lines"][:-1] + [c["lines"][c["victim"]], c["lines"][-1]]),
        set(),
        {"duplicate_id": 1},
    ),
    "missing_author": lambda c: (
        _replace_line(
            c["lines"], c["victim"], _without_key(c["lines"][c["victim"]], c["author_key"])
        ),
        {c["victim_id"]},
        {"missing_field:author": 1},
    ),
    "garbage_block": lambda c: (
        b"".join(
            c["lines"][: c["victim"]]
            + [b"garbage, not a record\n"] * 100
            + c["lines"][c["victim"] :]
        ),
        set(),
        {"malformed_json": 100},
    ),
    "truncated_line_mid_file": lambda c: (
        _replace_line(
            c["lines"],
            c["victim"],
            c["lines"][c["victim"]][: len(c["lines"][c["victim"]]) // 2] + b"\n",
        ),
        {c["victim_id"]},
        {"malformed_json": 1},
    ),
}


# --------------------------------------------------------------------------- faults, kept rows


@pytest.mark.parametrize("chunk_mb", CHUNK_MB)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_keeps_exactly_the_undamaged_records(case, fault, chunk_mb, tmp_path):
    corpus, clean = case
    data, lost, extra = FAULTS[fault](clean)
    path = corpus.with_records(data, tmp_path / "in")
    report, rows = ingest(path, tmp_path / "out", chunk_mb)
    expected_rows = clean["rows"].filter(~pl.col("post_id").is_in(sorted(lost)))
    assert lost <= set(clean["rows"]["post_id"])  # the damaged records were kept when clean
    assert rows.equals(expected_rows), fault
    assert counts(report) == plus(
        counts(clean["report"]), **{k.replace(":", "__"): v for k, v in extra.items()}
    )
    assert report["records"] == report["posts"] + report["dropped_total"]


@pytest.mark.parametrize("chunk_mb", CHUNK_MB)
def test_clean_run_is_the_same_at_every_chunk_size(case, chunk_mb, tmp_path):
    corpus, clean = case
    path = corpus.with_records(clean["data"], tmp_path / "in")
    report, rows = ingest(path, tmp_path / "out", chunk_mb)
    assert rows.equals(clean["rows"]) and counts(report) == counts(clean["report"])


def test_minus_one_links_become_null(convokit_case, tmp_path):
    """ConvoKit's reply-to placeholders -1 and "-1" mean no parent: null, as for a root."""
    corpus, clean = convokit_case
    lines = list(clean["lines"])
    changed = []
    for value, i in ((-1, clean["victim"]), ("-1", len(lines) - 1)):
        obj = json.loads(lines[i])
        obj["reply-to"] = value
        lines[i] = (json.dumps(obj) + "\n").encode()
        changed.append(obj["id"])
    path = corpus.with_records(b"".join(lines), tmp_path / "in")
    for chunk_mb in CHUNK_MB:
        report, rows = ingest(path, tmp_path / f"out-{chunk_mb}", chunk_mb)
        expected = clean["rows"].with_columns(
            pl.when(pl.col("post_id").is_in(changed))
            .then(None)
            .otherwise(pl.col("reply_to"))
            .alias("reply_to")
        )
        assert rows.equals(expected) and counts(report) == counts(clean["report"])
        assert rows.filter(pl.col("reply_to") == "-1").height == 0


# --------------------------------------------------------------------------- compressions


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    if kind == "gzip":
        return gzip.compress(data)
    if kind == "bzip2":
        return bz2.compress(data)
    return lzma.compress(data, format=lzma.FORMAT_XZ)


SUFFIX = {"zstd": ".zst", "gzip": ".gz", "bzip2": ".bz2", "xz": ".xz"}


@pytest.mark.parametrize("kind", sorted(SUFFIX))
def test_compressed_input_equals_the_plain_run(pushshift_case, kind, tmp_path):
    corpus, clean = pushshift_case
    name = corpus.records.name + SUFFIX[kind]
    path = corpus.with_records(_compress(kind, clean["data"]), tmp_path / "in", name)
    report, rows = ingest(path, tmp_path / "out", 0.01)
    assert rows.equals(clean["rows"]) and counts(report) == counts(clean["report"])


def test_multi_frame_streams_are_read_whole(tmp_path):
    """Concatenated frames (pzstd, pigz -i, pbzip2) and a gzip file named .zst: by content."""
    lines = [json.dumps(_comment(f"c{i}")).encode() + b"\n" for i in range(300)]
    half = len(lines) // 2
    for kind in SUFFIX:
        data = _compress(kind, b"".join(lines[:half])) + _compress(kind, b"".join(lines[half:]))
        path = tmp_path / f"RC_multi{SUFFIX[kind]}"
        path.write_bytes(data)
        report, rows = ingest(path, tmp_path / kind)
        assert rows["post_id"].to_list() == [f"c{i}" for i in range(300)], kind
        assert report["dropped_total"] == 0
    misnamed = tmp_path / "RC_misnamed.zst"
    misnamed.write_bytes(gzip.compress(b"".join(lines)))
    report, rows = ingest(misnamed, tmp_path / "misnamed")
    assert rows.height == 300


@pytest.mark.parametrize("kind", sorted(SUFFIX))
def test_truncated_stream_stops_the_shard_naming_file_and_offset(
    pushshift_case, kind, tmp_path, capsys
):
    corpus, clean = pushshift_case
    name = corpus.records.name + SUFFIX[kind]
    packed = _compress(kind, clean["data"])
    path = corpus.with_records(packed[: len(packed) // 2], tmp_path / "in", name)
    out = tmp_path / "out"
    line = cli_one_line_error(
        [
            "ingest",
            "--input",
            str(path),
            "--out",
            str(out / "p.parquet"),
            "--report",
            str(out / "r.json"),
            "--settings",
            '{"chunk_mb": 0.01}',
        ],
        capsys,
    )
    assert str(path) in line and "truncated" in line and f"{len(packed) // 2:,}" in line
    assert not (out / "p.parquet").exists() and not (out / "r.json").exists()
    assert not list(out.glob(".*")) if out.exists() else True  # no temporaries left behind


def _comment(cid: str, **extra) -> dict:
    return {
        "id": cid,
        "author": "alice",
        "subreddit": "AskX",
        "created_utc": 1500000000,
        "body": f"comment {cid}",
        "parent_id": "t3_s0",
        "link_id": "t3_s0",
        **extra,
    }


# magic bytes of formats the ingest does not read, followed by bytes that are not text
REFUSED = {
    "lz4": b"\x04\x22\x4d\x18" + bytes(range(256)) * 4,
    "7z": b"7z\xbc\xaf\x27\x1c" + bytes(range(256)) * 4,
    "rar": b"Rar!\x1a\x07\x00" + bytes(range(256)) * 4,
    "zip": b"PK\x03\x04" + bytes(range(256)) * 4,
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_other_compressions_are_refused_in_one_line(kind, tmp_path, capsys):
    path = tmp_path / "RC_2019-01.ndjson"  # the name does not say; the content does
    path.write_bytes(REFUSED[kind])
    out = tmp_path / "out"
    line = cli_one_line_error(
        [
            "ingest",
            "--input",
            str(path),
            "--out",
            str(out / "p.parquet"),
            "--report",
            str(out / "r.json"),
            "--settings",
            INGEST_JSON,
        ],
        capsys,
    )
    assert str(path) in line and kind in line and "zstd" in line
    assert not (out / "p.parquet").exists()


def test_unknown_binary_content_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "RC_2019-01.br"  # brotli has no magic bytes: binary content, refused
    path.write_bytes(bytes(range(256)) * 64)
    line = cli_one_line_error(
        [
            "ingest",
            "--input",
            str(path),
            "--out",
            str(tmp_path / "p.parquet"),
            "--report",
            str(tmp_path / "r.json"),
            "--settings",
            INGEST_JSON,
        ],
        capsys,
    )
    assert str(path) in line


@pytest.mark.parametrize("kind", sorted(SUFFIX))
def test_corrupt_stream_stops_the_shard_naming_file_and_offset(kind, tmp_path, capsys):
    data = b"".join(json.dumps(_comment(f"c{i}")).encode() + b"\n" for i in range(3000))
    packed = bytearray(_compress(kind, data))
    middle = len(packed) // 2
    packed[middle : middle + 64] = bytes(64)  # a run of zeros inside the compressed stream
    path = tmp_path / f"RC_corrupt{SUFFIX[kind]}"
    path.write_bytes(bytes(packed))
    line = cli_one_line_error(
        [
            "ingest",
            "--input",
            str(path),
            "--out",
            str(tmp_path / "p.parquet"),
            "--report",
            str(tmp_path / "r.json"),
            "--settings",
            INGEST_JSON,
        ],
        capsys,
    )
    assert str(path) in line and "byte" in line
    assert not (tmp_path / "p.parquet").exists()


def test_truncated_corpus_zip_member_is_one_line(tmp_path, capsys):
    corpus = _write_small_convokit(tmp_path / "subreddit-X", 2000)
    archive = tmp_path / "subreddit-X.corpus.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for f in corpus.iterdir():
            zf.write(f, f"subreddit-X/{f.name}")
    damaged = bytearray(archive.read_bytes())
    info = zipfile.ZipFile(archive).getinfo("subreddit-X/utterances.jsonl")
    start = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    damaged[start : start + 32] = bytes(32)  # the member's deflate stream is damaged
    archive.write_bytes(bytes(damaged))
    line = cli_one_line_error(
        [
            "ingest",
            "--input",
            str(archive),
            "--out",
            str(tmp_path / "p.parquet"),
            "--report",
            str(tmp_path / "r.json"),
            "--settings",
            INGEST_JSON,
        ],
        capsys,
    )
    assert str(archive) in line
    assert not (tmp_path / "p.parquet").exists()


def _write_small_convokit(d: Path, n: int) -> Path:
    d.mkdir(parents=True)
    rows = [
        {
            "id": f"u{i}",
            "conversation_id": "u0",
            "speaker": f"user{i % 17}",
            "reply-to": None if i == 0 else "u0",
            "timestamp": 1500000000 + i,
            "text": f"text number {i} " * 5,
            "meta": {"subreddit": "X", "score": i},
            "vectors": [],
        }
        for i in range(n)
    ]
    (d / "utterances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "conversations.json").write_text(
        json.dumps({"u0": {"meta": {"title": "T"}, "vectors": []}})
    )
    return d


# --------------------------------------------------------------------------- merge and bots


def _cornell_shards(tmp_path: Path, bots: set[str]) -> tuple[list[str], list[str]]:
    """Cornell ingested three times over: the ConvoKit directory, then its RS_ and RC_ copies."""
    if not CORNELL.is_dir():
        pytest.skip(f"reference corpus {CORNELL} is absent (it is only present in CI)")
    rs, rc = cornell_as_pushshift(CORNELL, tmp_path / "ps")
    posts, reports = [], []
    for name, path in (("convokit", CORNELL), ("rs", rs), ("rc", rc)):
        ingest_shard(
            path,
            tmp_path / f"{name}.parquet",
            tmp_path / f"{name}.json",
            INGEST,
            shard=name,
            bots=bots,
        )
        posts.append(str(tmp_path / f"{name}.parquet"))
        reports.append(str(tmp_path / f"{name}.json"))
    return posts, reports


def test_convokit_and_pushshift_copies_merge_to_the_convokit_posts(tmp_path):
    """Every Cornell post is seen twice; bots are judged on the de-duplicated posts, so an
    account with two real posts (ludabot) does not turn into a templated bot, and the merged
    table is exactly the ConvoKit shard's posts."""
    posts, reports = _cornell_shards(tmp_path, BOTS)
    report = merge(posts, reports, tmp_path / "posts.parquet", tmp_path / "report.json")
    alone = pl.read_parquet(posts[0])
    merged = pl.read_parquet(tmp_path / "posts.parquet")
    assert merged.equals(alone)
    assert report["posts"] == alone.height == 1357  # 1,360 less 3 listed bots' posts
    assert report["merge"]["templated_bots"] == []
    assert report["merge"]["cross_shard_duplicates"] == alone.height
    assert report["records"] == report["posts"] + report["dropped_total"]


def test_single_post_bots_are_caught_by_their_marks(tmp_path):
    """Without the shipped list, the bots of the Cornell corpus that post once or twice are
    found by what they write (a link to their own name, a ^superscript footer); the humans
    whose names end in bot (aguabot, ludabot, probs_not_a_robot) are kept."""
    posts, reports = _cornell_shards(tmp_path, {"AutoModerator"})
    report = merge(posts, reports, tmp_path / "posts.parquet", tmp_path / "report.json")
    assert report["merge"]["templated_bots"] == [
        "DirectImageLinkerBot",
        "LittleHelperRobot",
        "autowikibot",
    ]
    # each bot post is there three times (ConvoKit, RS_/RC_ copy): all counted as bot
    assert report["merge"]["bot_posts"] == 3 * 2
    authors = set(pl.read_parquet(tmp_path / "posts.parquet")["author"])
    assert {"aguabot", "ludabot", "probs_not_a_robot", "could-of-bot"} <= authors


def test_marks_rule_on_planted_accounts():
    from splits.ingest.bots import templated_bots

    texts = {
        "OneShotBot": ["Here you go! ^(I'm ^a ^bot) ^| ^[feedback](/message/compose?to=x)"],
        "LinkerBot": ["[Mobile link](https://x.org) | [FAQ](/r/LinkerBot/wiki)"],
        "FooterBot": ["answer ^^built ^^by ^^someone ^^else"],
        "Talbot": ["I'm Talbot, /u/Talbot is my alt, not a bot account of mine"],
        "human_bot": ["just chatting about my robot vacuum"],
        "templatebot": [f"Converted {i} units" for i in range(4)],
        "AlmostBot": ["a", "b", "c", "I am a bot"],  # one marked post in four: kept
    }
    frame = pl.DataFrame(
        [{"author": a, "text": t} for a, ts in texts.items() for t in ts],
        schema={"author": pl.String, "text": pl.String},
    )
    assert templated_bots(frame.lazy()) == ["FooterBot", "LinkerBot", "OneShotBot", "templatebot"]


# --------------------------------------------------------------------------- empty input


def test_zero_posts_after_ingest_is_one_error_naming_the_inputs(tmp_path, capsys):
    empty = tmp_path / "RC_empty.ndjson"
    empty.write_bytes(b"")
    deleted = tmp_path / "RC_deleted.ndjson"
    deleted.write_text(json.dumps(_comment("d1", body="[deleted]")) + "\n")
    posts, reports = [], []
    for path in (empty, deleted):
        report = ingest_shard(
            path, tmp_path / f"{path.stem}.parquet", tmp_path / f"{path.stem}.json", INGEST
        )
        assert report["posts"] == 0  # one empty shard is not an error in itself
        posts.append(str(tmp_path / f"{path.stem}.parquet"))
        reports.append(str(tmp_path / f"{path.stem}.json"))
    with pytest.raises(InputError) as err:
        merge(posts, reports, tmp_path / "posts.parquet", tmp_path / "report.json")
    message = str(err.value)
    assert "\n" not in message and str(empty) in message and str(deleted) in message
    assert "deleted_text" in message
    assert not (tmp_path / "posts.parquet").exists()
    line = cli_one_line_error(
        [
            "merge-posts",
            "--posts",
            *posts,
            "--reports",
            *reports,
            "--out",
            str(tmp_path / "posts.parquet"),
            "--report",
            str(tmp_path / "report.json"),
        ],
        capsys,
    )
    assert "no posts" in line and str(empty) in line


# --------------------------------------------------------------------------- property


def _small_records(fmt: str, n: int) -> bytes:
    rows = []
    for i in range(n):
        text = f"comment {i} " + "x" * (i * 37 % 400)
        if fmt == "pushshift":
            rows.append(_comment(f"c{i}", body=text))
        else:
            rows.append(
                {
                    "id": f"c{i}",
                    "conversation_id": "c0",
                    "speaker": f"user{i % 5}",
                    "reply-to": None if i == 0 else "c0",
                    "timestamp": 1500000000 + i,
                    "text": text,
                    "meta": {"subreddit": "AskX", "score": i},
                }
            )
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


CORRUPTIONS = st.lists(
    st.tuples(
        st.sampled_from(["cut", "insert", "delete", "flip", "duplicate", "newline"]),
        st.floats(0, 1, exclude_max=True),
        st.binary(min_size=1, max_size=12),
    ),
    max_size=6,
)


def _corrupt(data: bytes, corruptions) -> bytes:
    for kind, where, payload in corruptions:
        if not data:
            data = payload
            continue
        at = int(where * len(data))
        if kind == "cut":
            data = data[:at]
        elif kind == "insert":
            data = data[:at] + payload + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + len(payload) :]
        elif kind == "flip":
            data = data[:at] + bytes([data[at] ^ payload[0]]) + data[at + 1 :]
        elif kind == "duplicate":
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end + 1
            data = data + data[start:end]
        else:
            data = data[:at] + b"\n" + data[at:]
    return data


def _mostly_not_text(head: bytes) -> bool:
    """Over 30% of the decoded characters are replacement or control characters (other than
    tab and line ends): the documented rule for refusing a file as binary."""
    text = head.decode("utf-8", errors="replace")
    bad = sum(
        1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\t\n\r") or c == "\x7f"
    )
    return bad > 0.3 * len(text)


# magic bytes of the formats the reader tells by content (read as compressed, or refused): a
# corrupted file that happens to open with one is not read as text, and fails as damaged
_MAGIC = (
    b"\x28\xb5\x2f\xfd",  # zstd
    b"\x1f\x8b",  # gzip
    b"BZh",  # bzip2
    b"\xfd7zXZ\x00",  # xz
    b"PK\x03\x04",  # zip
    b"7z\xbc\xaf\x27\x1c",  # 7z
    b"Rar!\x1a\x07",  # rar
    b"\x04\x22\x4d\x18",  # lz4
    b"\x02\x21\x4c\x18",  # lz4 (legacy)
    b"\x1f\x9d",  # compress (.Z)
    b"\x1f\xa0",  # compress (LZH)
    b"LZIP",  # lzip
    b"\x89LZO\x00",  # lzo
    b"\x5d\x00\x00",  # lzma (legacy)
)


def _opens_with_magic(head: bytes) -> bool:
    skippable_zstd = len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18"
    return skippable_zstd or head.startswith(_MAGIC)


def _records_written(data: bytes) -> int:
    """Lines that hold anything but white space: each one is a record as written (a UTF-8
    byte order mark opening the file is not part of its first line)."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    return sum(1 for line in data.split(b"\n") if line.strip())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    corruptions=CORRUPTIONS,
    n=st.integers(0, 40),
    chunk_mb=st.floats(0.004, 0.02),
    fmt=st.sampled_from(["pushshift", "convokit"]),
)
def test_kept_plus_dropped_equals_written(tmp_path_factory, corruptions, n, chunk_mb, fmt):
    data = _corrupt(_small_records(fmt, n), corruptions)
    work = tmp_path_factory.mktemp("prop")
    if fmt == "convokit":
        path = work / "corpus"
        path.mkdir()
        (path / "utterances.jsonl").write_bytes(data)
    else:
        path = work / "RC_prop.ndjson"
        path.write_bytes(data)
    if _mostly_not_text(data[: 1 << 16]) or _opens_with_magic(data):  # e.g. random bytes left
        with pytest.raises(InputError, match=str(path)):
            ingest_shard(
                path,
                work / "p.parquet",
                work / "r.json",
                schema_defaults(IngestSettings, chunk_mb=chunk_mb),
            )
        return
    report = ingest_shard(
        path,
        work / "p.parquet",
        work / "r.json",
        schema_defaults(IngestSettings, chunk_mb=chunk_mb),
    )
    written = _records_written(data)
    assert report["records"] == written
    assert report["posts"] + report["dropped_total"] == written
    assert pl.read_parquet(work / "p.parquet").height == report["posts"]
    assert set(report["dropped"]) == set(REASONS)


def test_bots_signed_as_in_the_issue_are_caught_and_humans_kept():
    """The two bots of issue 25 that got through: Reddit-Book-Bot ("Beep. Boop. I'm a robot."
    and a full https://www.reddit.com/user/<name>/ link) and useles-converter-bot (varied
    conversions, the same closing line); an account not named bot that signs its posts as a
    bot, or links its own user page as a relative Markdown link; humans who say "beep boop"
    once, mention their own /u/ name in plain text, or whose name ends in bot, are kept."""
    from splits.ingest.bots import bot_verdicts

    book = (
        "Beep. Boop. I'm a robot. Here's a copy of\n\n###[Frankenstein](https://snewd.com/"
        "ebooks/frankenstein/)\n\nWas I a good bot? | [info](https://www.reddit.com/user/"
        "Reddit-Book-Bot/) | [More Books](https://old.reddit.com/user/Reddit-Book-Bot/"
        "comments/i15x1d/full_list_of_books_and_commands/)"
    )
    converter = [
        f"{n} feet is the length of {n * 0.37:.2f} {thing} lined up.\n\n"
        "I'm not useless, I'm a converter with feelings"
        for n, thing in ((12, "bananas"), (40, "school buses"), (7, "Danny DeVitos"))
    ]
    texts = {
        "Reddit-Book-Bot": [book],
        "useles-converter-bot": converter,
        "WikiSummarizer": [
            "Summary: the Arts Quad is ... \n\nI am a bot, and this action was performed automatically.",
            "Summary: Ithaca is gorges ... \n\n*I am a bot, and this action was performed automatically.*",
        ],
        "ThatConverter": [
            "3 miles is 4.8 km. [about me](/u/ThatConverter)",
            "10 lbs is 4.5 kg. [about me](/u/ThatConverter)",
        ],
        "friendly_human": [
            "beep boop, my roommate's alarm again",
            "dining halls are fine",
            "take CS 2110 early",
        ],
        "Talbot": ["I'm Talbot, /u/Talbot is my alt, not a bot account of mine"],
        "aguabot": ["So I got accepted to Cornell this year, school of engineering"],
    }
    frame = pl.DataFrame(
        [{"author": a, "text": t} for a, ts in texts.items() for t in ts],
        schema={"author": pl.String, "text": pl.String},
    )
    verdicts = bot_verdicts(frame.lazy())
    assert sorted(verdicts) == [
        "Reddit-Book-Bot",
        "ThatConverter",
        "WikiSummarizer",
        "useles-converter-bot",
    ]
    assert verdicts["Reddit-Book-Bot"]["posts"] == 1
    assert "says it is a bot: 1" in verdicts["Reddit-Book-Bot"]["reason"]
    assert "links to its own user page: 1" in verdicts["Reddit-Book-Bot"]["reason"]
    assert verdicts["useles-converter-bot"]["reason"].startswith("the same last line in 3 of 3")
    assert verdicts["ThatConverter"]["reason"].startswith("signed as a bot in 2 of 2 posts")
    # "Beep. Boop." punctuation variants, the "I'm a bot" family, curly apostrophes
    for text in ("Beep! Boop!", "beep... boop", "I’m just a simple bot", "I am a friendly robot"):
        alone = pl.DataFrame({"author": ["x-bot"], "text": [text]})
        assert bot_verdicts(alone.lazy()), text


def test_the_signature_prefilter_keeps_every_signer():
    """The signers (accounts not named bot) are looked for only in posts holding one of
    SIGN_WORDS or a character the match removes: signatures in any case, with Reddit's
    superscript and emphasis inside their words, a user link in capitals, are still found, as
    the patterns alone over every post find them (written out here)."""
    import re

    from splits.ingest.bots import BOT_SELF_DECLARED, USER_LINK, bot_verdicts

    signed = {
        "LoudSigner": [
            "BEEP BOOP, I AM A BOT",
            "I'M A BOT. THIS ACTION WAS PERFORMED AUTOMATICALLY",
        ],
        "StarSigner": ["i am a ro*bot, be*ep bo*op", "i am a b^ot"],
        "UnderSigner": ["I'm a helper r_o_b_o_t here", "Beep_Boop, I am a bot"],
        "LinkSigner": ["see [me](/USER/LinkSigner)", "or [me](/U/LinkSigner)"],
        "CurlySigner": ["I\u2019m a bot", "I\u02bcm only a simple bot"],
    }
    unsigned = {
        "Human1": ["a robotic arm", "bots everywhere"],
        "Human2": ["beep beep, said the car", "nothing here"],
    }
    rows = [{"author": a, "text": t} for d in (signed, unsigned) for a, ts in d.items() for t in ts]
    frame = pl.DataFrame(rows, schema={"author": pl.String, "text": pl.String})

    def plain(text: str) -> str:
        return re.sub("[\u2019\u2018\u02bc]", "'", re.sub(r"[\^*_]", "", text))

    declared = re.compile(BOT_SELF_DECLARED.removeprefix("(?i)"), re.IGNORECASE)
    user_link = re.compile(USER_LINK.removeprefix("(?i)"), re.IGNORECASE)
    by_patterns = sorted(
        author
        for author, texts in {**signed, **unsigned}.items()
        if sum(bool(declared.search(plain(t)) or user_link.search(t)) for t in texts) >= 2
    )
    assert by_patterns == sorted(signed)
    assert sorted(bot_verdicts(frame.lazy())) == by_patterns


def test_merge_report_says_who_was_dropped_and_why_on_real_cornell_text(tmp_path):
    """Without the shipped list, the real Cornell bots are dropped with a reason each in the
    ingest report (merge.bots); its humans named ...bot are kept."""
    posts, reports = _cornell_shards(tmp_path, {"AutoModerator"})
    report = merge(posts, reports, tmp_path / "posts.parquet", tmp_path / "report.json")
    bots = report["merge"]["bots"]
    assert sorted(bots) == ["DirectImageLinkerBot", "LittleHelperRobot", "autowikibot"]
    assert "links to its own subreddit or inbox: 1" in bots["DirectImageLinkerBot"]["reason"]
    assert "^superscript footer: 1" in bots["LittleHelperRobot"]["reason"]
    assert all(b["posts"] == 1 for b in bots.values())
    assert json.loads((tmp_path / "report.json").read_text())["merge"]["bots"] == bots
