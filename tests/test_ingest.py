"""Ingest (docs/method.md §2.1): reference corpus vs ConvoKit, bad input accounted exactly, formats, merge,
config errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import zstandard
from splits.config.settings import schema_defaults
from splits.ingest.bots import load_bot_list
from splits.ingest.clean import REASONS
from splits.ingest.merge import merge
from splits.ingest.read import ingest_shard, shard_names
from splits.ingest.settings import IngestSettings

REPO = Path(__file__).resolve().parents[1]

INGEST = schema_defaults(IngestSettings)


def _utt(
    uid,
    conv,
    speaker="alice",
    text="hello there",
    reply=None,
    ts=1500000000,
    sub="Cornell",
    score=1,
    spelling="new",
):
    keys = (
        ("speaker", "conversation_id", "reply-to")
        if spelling == "new"
        else ("user", "root", "reply_to")
    )
    return {
        "id": uid,
        keys[1]: conv,
        "text": text,
        keys[0]: speaker,
        "meta": {"score": score, "subreddit": sub, "stickied": False},
        keys[2]: reply,
        "timestamp": ts,
        "vectors": [],
    }


def _write_corpus(d: Path, lines: list[bytes], titles: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "utterances.jsonl").write_bytes(b"".join(lines))
    (d / "conversations.json").write_text(
        json.dumps(
            {k: {"meta": {"title": v, "num_comments": 1}, "vectors": []} for k, v in titles.items()}
        )
    )
    (d / "speakers.json").write_text("{}")
    (d / "corpus.json").write_text("{}")
    (d / "index.json").write_text(json.dumps({"version": 1}))
    return d


def _line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _bad_corpus(d: Path, spelling: str = "new") -> tuple[Path, dict[str, int], dict[str, str]]:
    """A corpus with every kind of dirt; returns the path, the exact expected drop counts and
    the valid posts (id -> expected text)."""
    u = lambda *a, **k: _line(_utt(*a, spelling=spelling, **k))  # noqa: E731
    lines = [
        u("s1", "s1", text="body one"),  # submission with title
        u("c1", "s1", reply="s1", text="a comment"),
        u("c2", "s1", reply="c1", text="  café ünïcode ✓  "),
        u("s2", "s2", text=""),  # link post: title only
        u("s3", "s3", text=""),  # empty body and empty title: empty_text
        b'{"id": "bad1", "conversation_id": \n',  # malformed JSON
        b"[1, 2, 3]\n",  # not an object
        b'{"id": "bad2", "text": "caf\xff", "speaker": "x"}\n',  # invalid UTF-8
        _line({k: v for k, v in _utt("m1", "s1").items() if k not in ("speaker", "user")}),
        _line({k: v for k, v in _utt("m2", "s1").items() if k != "id"}),
        _line({**_utt("m3", "s1"), "meta": {"score": 1}}),  # no subreddit
        _line({k: v for k, v in _utt("m4", "s1").items() if k != "timestamp"}),
        _line({**_utt("m5", "s1"), "timestamp": "yesterday"}),  # invalid timestamp
        _line({k: v for k, v in _utt("m6", "s1").items() if k != "text"}),
        u("d1", "s1", reply="s1", text="[deleted]", speaker="[deleted]"),
        u("d2", "s1", reply="s1", text="[removed]"),
        u("d3", "s1", reply="s1", text="   "),
        u("d4", "s1", reply="s1", text="still here", speaker="[deleted]"),
        u("b1", "s1", reply="s1", text="I am a bot", speaker="AutoModerator"),
        u("b2", "s1", reply="s1", text="listed bot", speaker="RemindMeBot"),
        u("c1", "s1", reply="s1", text="duplicate of c1"),
        b"\n",
        u("c3", "s1", reply="c2", text="float stamp", ts=1500000000.7, score=None),
        u("c4", "s2", reply="s2", text="UPPER sub", sub="CorNell", score="7"),
    ]
    expected_drops = {
        "malformed_json": 2,
        "invalid_utf8": 1,
        "missing_field:author": 1,
        "missing_field:id": 1,
        "missing_field:subreddit": 1,
        "missing_field:timestamp": 1,
        "invalid_field:timestamp": 1,
        "missing_field:text": 1,
        "deleted_text": 1,
        "removed_text": 1,
        "empty_text": 2,
        "deleted_author": 1,
        "bot": 2,
        "duplicate_id": 1,
    }
    valid = {
        "s1": "Title one\n\nbody one",
        "c1": "a comment",
        "c2": "  café ünïcode ✓  ",
        "s2": "Link title",
        "c3": "float stamp",
        "c4": "UPPER sub",
    }
    titles = {"s1": "Title one", "s2": "Link title", "s3": " "}
    return _write_corpus(d, lines, titles), expected_drops, valid


def _check_bad(report: dict, posts: pl.DataFrame, expected: dict, valid: dict) -> None:
    assert report["dropped"] == {r: expected.get(r, 0) for r in REASONS}
    assert report["records"] == 23
    assert report["blank_lines"] == 1
    assert report["posts"] == len(valid) == posts.height
    assert dict(zip(posts["post_id"], posts["text"], strict=True)) == valid
    row = posts.row(by_predicate=pl.col("post_id") == "c3", named=True)
    assert row["created_utc"] == 1500000000 and row["score"] is None
    row = posts.row(by_predicate=pl.col("post_id") == "c4", named=True)
    assert row["subreddit"] == "cornell" and row["score"] == 7
    assert posts.filter(pl.col("post_id") == "c1")["reply_to"].item() == "s1"
    assert set(posts.filter(pl.col("kind") == "submission")["post_id"]) == {"s1", "s2"}


@pytest.mark.parametrize("chunk_mb", [16, 0.0005])
def test_bad_convokit_corpus_counts_every_reason(tmp_path, chunk_mb):
    corpus, expected, valid = _bad_corpus(tmp_path / "bad")
    bots = load_bot_list(REPO / "resources" / "bots.txt")
    report = ingest_shard(
        corpus,
        tmp_path / "out.parquet",
        tmp_path / "r.json",
        schema_defaults(IngestSettings, chunk_mb=chunk_mb),
        bots=bots,
    )
    _check_bad(report, pl.read_parquet(tmp_path / "out.parquet"), expected, valid)
    assert json.loads((tmp_path / "r.json").read_text()) == report


def test_old_key_spelling_and_corpus_zip(tmp_path):
    corpus, expected, valid = _bad_corpus(tmp_path / "subreddit-Old", spelling="old")
    archive = tmp_path / "subreddit-Old.corpus.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in corpus.iterdir():
            zf.write(f, f"subreddit-Old/{f.name}")
    bots = load_bot_list(REPO / "resources" / "bots.txt")
    report = ingest_shard(archive, tmp_path / "z.parquet", tmp_path / "z.json", INGEST, bots=bots)
    _check_bad(report, pl.read_parquet(tmp_path / "z.parquet"), expected, valid)
    assert shard_names([str(archive), str(corpus)]) == {
        "subreddit-Old": str(archive),
        "subreddit-Old-2": str(corpus),
    }


def test_empty_inputs_finish(tmp_path):
    corpus = _write_corpus(tmp_path / "empty", [], {})
    report = ingest_shard(corpus, tmp_path / "e.parquet", tmp_path / "e.json", INGEST)
    assert report["records"] == report["posts"] == 0
    assert pl.read_parquet(tmp_path / "e.parquet").columns[:3] == ["post_id", "kind", "subreddit"]
    (tmp_path / "RC_empty.ndjson").write_bytes(b"")
    assert (
        ingest_shard(
            tmp_path / "RC_empty.ndjson", tmp_path / "p.parquet", tmp_path / "p.json", INGEST
        )["posts"]
        == 0
    )


def test_pushshift_ndjson_and_zst(tmp_path):
    subs = [
        {
            "id": "s1",
            "author": "alice",
            "subreddit": "AskX",
            "created_utc": "1500000000",
            "title": "T",
            "selftext": "body",
            "score": 3,
        },
        {
            "id": "s2",
            "author": "bob",
            "subreddit": "AskX",
            "created_utc": 1500000001,
            "title": "Link",
            "selftext": "",
            "score": 1,
        },
        {
            "id": "s3",
            "author": "[deleted]",
            "subreddit": "AskX",
            "created_utc": 1500000002,
            "title": "x",
            "selftext": "[deleted]",
        },
    ]
    comments = [
        {
            "id": "c1",
            "author": "carol",
            "subreddit": "AskX",
            "created_utc": 1500000003,
            "body": "hi",
            "parent_id": "t3_s1",
            "link_id": "t3_s1",
            "score": 2,
        },
        {
            "id": "c2",
            "author": "dave",
            "subreddit": "AskX",
            "created_utc": 1500000004,
            "body": "re",
            "parent_id": "t1_c1",
            "link_id": "t3_s1",
        },
        {
            "id": "c3",
            "author": "erin",
            "subreddit": "AskX",
            "created_utc": 1500000005,
            "body": "no link",
            "parent_id": "t1_c1",
        },
    ]
    rs = b"".join(_line(o) for o in subs)
    rc = b"".join(_line(o) for o in comments) + b"{not json\n"
    (tmp_path / "RS_2018-01").mkdir()
    (tmp_path / "RS_2018-01.ndjson").write_bytes(rs)
    (tmp_path / "RC_2018-01.zst").write_bytes(zstandard.ZstdCompressor().compress(rc))
    r1 = ingest_shard(
        tmp_path / "RS_2018-01.ndjson", tmp_path / "rs.parquet", tmp_path / "rs.json", INGEST
    )
    r2 = ingest_shard(
        tmp_path / "RC_2018-01.zst", tmp_path / "rc.parquet", tmp_path / "rc.json", INGEST
    )
    assert r1["posts"] == 2 and r1["dropped"]["deleted_text"] == 1
    assert (
        r2["posts"] == 2
        and r2["dropped"]["missing_field:conversation_id"] == 1
        and r2["dropped"]["malformed_json"] == 1
    )
    posts = pl.concat(
        [pl.read_parquet(tmp_path / "rs.parquet"), pl.read_parquet(tmp_path / "rc.parquet")]
    )
    rows = {r["post_id"]: r for r in posts.iter_rows(named=True)}
    assert rows["s1"]["text"] == "T\n\nbody" and rows["s1"]["created_utc"] == 1500000000
    assert rows["s2"]["text"] == "Link" and rows["s2"]["kind"] == "submission"
    assert (
        rows["c2"]["reply_to"] == "c1"
        and rows["c2"]["conversation_id"] == "s1"
        and rows["c2"]["score"] is None
    )
    assert rows["c1"]["subreddit"] == "askx"


def test_merge_cross_shard_duplicates_and_templated_bots(tmp_path):
    a = [
        _line(_utt(f"a{i}", "a0", reply=None if i == 0 else "a0", text=f"post {i}"))
        for i in range(4)
    ]
    a += [
        _line(
            _utt(
                f"t{i}",
                "a0",
                reply="a0",
                speaker="helpful_bot",
                text=f"Converted {i} units. I am a bot",
            )
        )
        for i in range(4)
    ]
    a += [_line(_utt("h1", "a0", reply="a0", speaker="Abbot", text="a human named Abbot"))]
    b = [
        _line(_utt("a1", "a0", reply="a0", text="cross-shard duplicate")),
        _line(_utt("b1", "a0", reply="a0")),
    ]
    ca = _write_corpus(tmp_path / "A", a, {"a0": "T"})
    cb = _write_corpus(tmp_path / "B", b, {})
    for name, c in (("A", ca), ("B", cb)):
        ingest_shard(c, tmp_path / f"{name}.parquet", tmp_path / f"{name}.json", INGEST, shard=name)
    report = merge(
        [str(tmp_path / "A.parquet"), str(tmp_path / "B.parquet")],
        [str(tmp_path / "A.json"), str(tmp_path / "B.json")],
        tmp_path / "posts.parquet",
        tmp_path / "report.json",
    )
    posts = pl.read_parquet(tmp_path / "posts.parquet")
    assert report["merge"]["templated_bots"] == ["helpful_bot"]
    assert report["dropped"]["bot"] == 4 and report["dropped"]["duplicate_id"] == 1
    assert sorted(posts["post_id"]) == ["a0", "a1", "a2", "a3", "b1", "h1"]
    assert posts.filter(pl.col("post_id") == "a1")["text"].item() == "post 1"
    assert report["records"] == 11 and report["posts"] == 6 and set(report["shards"]) == {"A", "B"}


def test_reference_corpus_matches_convokit(reference_dir, tmp_path):
    convokit = pytest.importorskip(
        "convokit", reason="convokit (the convokit extra) is not installed"
    )
    path = reference_dir / "realdata" / "convokit_cornell"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    bots = load_bot_list(REPO / "resources" / "bots.txt")
    report = ingest_shard(path, tmp_path / "c.parquet", tmp_path / "c.json", INGEST, bots=bots)
    ours = pl.read_parquet(tmp_path / "c.parquet")
    corpus = convokit.Corpus(filename=str(path))
    # the documented cleaning, applied independently to what ConvoKit loads
    expected = {}
    dropped = 0
    for utt in corpus.iter_utterances():
        body = utt.text or ""
        is_sub = utt.id == utt.conversation_id
        title = corpus.get_conversation(utt.conversation_id).meta.get("title") if is_sub else None
        text = (
            (title + "\n\n" + body if body.strip() else title)
            if is_sub and title and title.strip()
            else body
        )
        if (
            body.strip() in ("[deleted]", "[removed]")
            or not text.strip()
            or utt.speaker.id == "[deleted]"
            or utt.speaker.id in bots
        ):
            dropped += 1
            continue
        expected[utt.id] = (
            utt.speaker.id,
            text,
            int(utt.timestamp),
            utt.reply_to,
            utt.meta["subreddit"].lower(),
            "submission" if is_sub else "comment",
        )
    got = {
        r["post_id"]: (
            r["author"],
            r["text"],
            r["created_utc"],
            r["reply_to"],
            r["subreddit"],
            r["kind"],
        )
        for r in ours.iter_rows(named=True)
    }
    assert got == expected
    assert report["records"] == 1519 and report["dropped_total"] == dropped
    assert report["dropped"]["deleted_text"] + report["dropped"]["removed_text"] == 78


def _snakemake_dry(tmp_path: Path, edit) -> subprocess.CompletedProcess:
    work = tmp_path / "repo"
    shutil.copytree(
        REPO,
        work,
        ignore=shutil.ignore_patterns(
            "results", "logs", ".snakemake", ".git", "__pycache__", "*.egg-info"
        ),
    )
    cfg = work / "config" / "config.yaml"
    cfg.write_text(edit(cfg.read_text()))
    return snakemake_fork.run(["-n", "--cores", "2"], work, timeout=300)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.replace("  shards: 2 #", "  shardz: 2 #"),
            "config error: synth.shardz: unknown key",
        ),
        (
            lambda s: s.replace("  chunk_mb: 16 #", "  chunk_mb: lots #"),
            "config error: ingest.chunk_mb:",
        ),
        (
            lambda s: s.replace("  enabled: true # ingest", "  enabled: false # ingest").replace(
                "  inputs: [] #", "  inputs: [no/such/corpus] #"
            ),
            "config error: ingest.inputs: input no/such/corpus does not exist",
        ),
    ],
)
def test_config_errors_stop_snakemake_with_one_line(tmp_path, edit, message):
    proc = _snakemake_dry(tmp_path, edit)
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("config error")]
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]


@pytest.mark.parametrize("indent", [None, 2])
def test_titles_streamed_in_small_chunks_equal_json_load(tmp_path, indent):
    """Fast (literal-cut) and fallback (entry by entry) title readers give what json.load gives."""
    from splits.ingest.sources import _Source
    from splits.ingest.titles import read_titles

    convs = {
        f"id{i}": {
            "meta": {"title": f'title "{i}", {{"meta": x}} é', "n": {"meta": 1}},
            "vectors": [],
        }
        for i in range(300)
    }
    d = _write_corpus(tmp_path / "t", [_line(_utt("id0", "id0"))], {})
    (d / "conversations.json").write_text(json.dumps(convs, indent=indent))
    got = read_titles(_Source(d), chunk_bytes=97)
    assert dict(zip(got["conversation_id"], got["title"], strict=True)) == {
        k: v["meta"]["title"] for k, v in convs.items()
    }


@pytest.mark.parametrize("indent", [None, 2])
def test_titles_of_an_id_given_twice_keep_the_first(tmp_path, indent):
    """An id repeated in conversations.json keeps its first title (one row per id, in file
    order), by both readers; without repeats every id comes back once, in file order."""
    from splits.ingest.sources import _Source
    from splits.ingest.titles import read_titles

    entries = [(f"id{i}", {"meta": {"title": f"t{i}"}, "vectors": []}) for i in range(50)]
    entries.insert(30, ("id7", {"meta": {"title": "second"}, "vectors": []}))
    text = json.dumps(dict(entries[:30]), indent=indent)[:-1].rstrip() + ", "
    text += json.dumps(dict(entries[30:]), indent=indent)[1:].lstrip()
    d = _write_corpus(tmp_path / "t", [_line(_utt("id0", "id0"))], {})
    (d / "conversations.json").write_text(text)
    got = read_titles(_Source(d), chunk_bytes=97)
    assert got["conversation_id"].to_list() == [f"id{i}" for i in range(50)]
    assert got["title"].to_list() == [f"t{i}" for i in range(50)]
    (d / "conversations.json").write_text(json.dumps(dict(entries[:30]), indent=indent))
    assert read_titles(_Source(d), chunk_bytes=97)["title"].to_list() == [
        f"t{i}" for i in range(30)
    ]


def test_bad_line_deep_in_a_big_chunk_costs_one_small_slow_piece(tmp_path):
    """One malformed line among thousands: the chunk is split around it (only a small piece
    goes line by line) and every valid line is kept; float timestamps later in the file
    switch the fast path to text columns without losing or changing anything."""
    lines = [
        _line(_utt(f"c{i}", "s0", reply="s0", text=f"comment number {i} " * 8)) for i in range(3000)
    ]
    lines[1234] = b'{"id": "broken", "text": \n'
    for i in range(2500, 3000):
        lines[i] = _line(_utt(f"c{i}", "s0", reply="s0", text="float stamp", ts=1500000000.9))
    corpus = _write_corpus(
        tmp_path / "big", [_line(_utt("s0", "s0", text="root"))] + lines, {"s0": "T"}
    )
    report = ingest_shard(
        corpus,
        tmp_path / "b.parquet",
        tmp_path / "b.json",
        schema_defaults(IngestSettings, chunk_mb=16),
    )
    posts = pl.read_parquet(tmp_path / "b.parquet")
    assert report["dropped"]["malformed_json"] == 1 and report["dropped_total"] == 1
    # one piece of at most 64 KiB went line by line, not the whole 1 MB chunk
    assert report["slow_chunks"] == 1 and report["slow_lines"] < 3001 / 4
    assert posts.height == 3000 and posts["post_id"].to_list() == ["s0"] + [
        f"c{i}" for i in range(3000) if i != 1234
    ]
    assert posts.filter(pl.col("text") == "float stamp")["created_utc"].unique().to_list() == [
        1500000000
    ]
    assert posts.row(0, named=True)["text"] == "T\n\nroot"


@pytest.mark.parametrize("case", ["convokit-layout", "title-not-first", "non-string-title"])
def test_titles_with_escaped_ids_and_any_layout_equal_json_load(tmp_path, caplog, case):
    """Ids and titles with escapes (an entry end ']}, "' inside a title), null and empty titles:
    what json.load gives, by the fast reader on ConvoKit's layout, by the entry-by-entry one
    where a meta's first key is not its title or a title is not a string."""
    import logging

    from splits.ingest.sources import _Source
    from splits.ingest.titles import read_titles

    titles = ['a "quoted" \\ title', None, "caf\u00e9 \u2028 line", "", 'x]}, "y']
    if case == "non-string-title":
        titles.append(7)
    convs = {}
    for i in range(120):
        meta = {"title": titles[i % len(titles)], "num_comments": i}
        if case == "title-not-first":
            meta = {"num_comments": i, "title": meta["title"]}
        convs[f'id"{i}\\' if i % 5 == 0 else f"id{i}"] = {"meta": meta, "vectors": []}
    d = _write_corpus(tmp_path / "t", [_line(_utt("id1", "id1"))], {})
    (d / "conversations.json").write_text(
        json.dumps(convs, ensure_ascii=case != "convokit-layout"), encoding="utf-8"
    )
    with caplog.at_level(logging.INFO, logger="splits.ingest.titles"):
        got = read_titles(_Source(d), chunk_bytes=211)
    fell_back = any("entry by entry" in r.getMessage() for r in caplog.records)
    assert fell_back == (case != "convokit-layout")
    want = {
        k: v["meta"]["title"] if isinstance(v["meta"]["title"], str) else None
        for k, v in convs.items()
    }
    assert dict(zip(got["conversation_id"], got["title"], strict=True)) == want


@pytest.mark.parametrize("chunk_bytes", [1, 100, 4096, 70_000])
@pytest.mark.parametrize("form", ["file", "file-bom", "zstd", "stream"])
def test_line_chunks_end_at_the_first_line_end_after_chunk_bytes(tmp_path, chunk_bytes, form):
    """Every way of reading makes the same chunks: each ends at the first line end at or after
    its byte ``chunk_bytes`` (the last one may not end at one), and together they are the
    file's bytes (less a byte order mark)."""
    import io
    import random

    from splits.ingest.sources import InputStream

    rng = random.Random(chunk_bytes)
    data = b"\n".join(b"x" * rng.randint(0, 900) for _ in range(400)) + b"\n{tail"
    want, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start + chunk_bytes - 1)
        end = len(data) if end < 0 else end + 1
        want.append(data[start:end])
        start = end
    path = tmp_path / "in.ndjson"
    if form == "stream":
        raw = io.BytesIO(data)
    elif form == "zstd":
        raw = io.BytesIO(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes((b"\xef\xbb\xbf" if form == "file-bom" else b"") + data)
        raw = open(path, "rb")  # noqa: SIM115 - closed with the stream
    with InputStream(raw, str(path)) as stream:
        assert list(stream.line_chunks(chunk_bytes)) == want


def test_title_index_lookup_equals_dict_oracle():
    from splits.ingest.titles import TitleIndex

    titles = pl.DataFrame(
        {
            "conversation_id": [f"k{i}" for i in range(2000)] + ["nul"],
            "title": [f"title {i}" for i in range(2000)] + [None],
        }
    )
    oracle = dict(zip(titles["conversation_id"], titles["title"], strict=True))
    queries = pl.Series(["k5", "k1999", "missing", None, "nul", "k0", "k00", ""], dtype=pl.String)
    index = TitleIndex(titles)
    expected = [oracle.get(q) if q is not None else None for q in queries]
    assert index.lookup(queries).to_list() == expected
    index_by_id = TitleIndex(titles)
    index_by_id.by_hash = False  # the path taken when two ids share a hash
    order = index_by_id.ids.arg_sort()
    index_by_id.ids, index_by_id.titles = (
        index_by_id.ids.gather(order),
        index_by_id.titles.gather(order),
    )
    assert index_by_id.lookup(queries).to_list() == expected
    assert TitleIndex(titles.head(0)).lookup(queries).to_list() == [None] * len(queries)


@pytest.mark.parametrize("chunk_mb", [0.0001, 16.0])
def test_post_id_from_the_fullname_only_where_the_id_is_missing(tmp_path, chunk_mb):
    """A Pushshift record's id is its ``id``; a record without one takes it from its fullname
    (``name``, ``t1_abc`` -> ``abc``), whether or not the rest of its chunk has ids (tiny
    chunks: many all-id chunks and a few mixed; one chunk: all mixed); one with neither is a
    missing id. Oracle: the rule written out over the records."""
    records = []
    for i in range(60):
        record = {
            "author": f"u{i % 7}",
            "subreddit": "AskX",
            "created_utc": 1500000000 + i,
            "body": f"comment {i}",
            "parent_id": "t3_s1",
            "link_id": "t3_s1",
            "name": f"t1_n{i}",
        }
        if i % 13 != 5:
            record["id"] = f"c{i}"
        if i == 44:
            del record["name"]  # neither: dropped as a missing id
        if i == 31:
            record["name"] = "plain"  # a name that is no fullname is the id as it is
        records.append(record)
    path = tmp_path / "RC_2018-02.ndjson"
    path.write_bytes(b"".join(_line(r) for r in records))
    report = ingest_shard(
        path,
        tmp_path / "rc.parquet",
        tmp_path / "rc.json",
        schema_defaults(IngestSettings, chunk_mb=chunk_mb),
    )

    def expected_id(record):
        if "id" in record:
            return record["id"]
        name = record.get("name")
        if (
            name is not None
            and len(name) > 3
            and name[0] == "t"
            and name[1].isdigit()
            and name[2] == "_"
        ):
            return name[3:]
        return name

    expected = [expected_id(r) for r in records if expected_id(r) is not None]
    assert pl.read_parquet(tmp_path / "rc.parquet")["post_id"].to_list() == expected
    assert report["dropped"]["missing_field:id"] == 1 and report["posts"] == 59
    assert {"n5", "n18", "plain"} <= set(expected) and "n6" not in expected


def test_parallel_chunks_give_the_bytes_of_a_serial_run(tmp_path, monkeypatch):
    """Chunks parsed and cleaned by worker threads, several in flight, come out in input
    order: the Parquet file is byte for byte that of a one-chunk-at-a-time run and the reports
    count the same (bad lines, duplicates and titles spread over many small chunks)."""
    import splits.ingest.read as ingest

    lines = [_line(_utt(f"s{k}", f"s{k}", text=f"root {k}")) for k in range(40)]
    for i in range(4000):
        k = i % 40
        lines.append(_line(_utt(f"c{i}", f"s{k}", reply=f"s{k}", text=f"comment {i} " * 3)))
        if i % 397 == 0:
            lines.append(b'{"id": "broken", "text": \n')
        if i % 541 == 0:
            lines.append(_line(_utt(f"c{i // 2}", "s0", text="a duplicate id")))
        if i % 613 == 0:
            lines.append(_line(_utt(f"d{i}", "s0", text="[deleted]")))
    corpus = _write_corpus(tmp_path / "c", lines, {f"s{k}": f"Title {k}" for k in range(40)})
    monkeypatch.setattr(ingest, "WORKERS", 1)
    monkeypatch.setattr(ingest, "IN_FLIGHT", 1)
    serial = ingest_shard(
        corpus,
        tmp_path / "serial.parquet",
        tmp_path / "s.json",
        schema_defaults(IngestSettings, chunk_mb=0.01),
    )
    monkeypatch.setattr(ingest, "WORKERS", 2)
    monkeypatch.setattr(ingest, "IN_FLIGHT", 3)
    parallel = ingest_shard(
        corpus,
        tmp_path / "par.parquet",
        tmp_path / "p.json",
        schema_defaults(IngestSettings, chunk_mb=0.01),
    )
    assert serial == parallel
    assert serial["dropped"]["malformed_json"] == 11 and serial["dropped"]["duplicate_id"] == 8
    assert serial["dropped"]["deleted_text"] == 7 and serial["posts"] == 4040
    assert (tmp_path / "serial.parquet").read_bytes() == (tmp_path / "par.parquet").read_bytes()
    posts = pl.read_parquet(tmp_path / "par.parquet")
    assert posts["post_id"].to_list()[:42] == [f"s{k}" for k in range(40)] + ["c0", "c1"]
    assert posts.filter(pl.col("post_id") == "s7")["text"].item() == "Title 7\n\nroot 7"


def test_ingest_by_hand_with_a_config_file(tmp_path, capsys):
    """`splits ingest --config FILE` takes ingest.chunk_mb from a config file, validated
    against the schema: the posts and report equal those of the rule's `--settings` run, and a
    chunk size the schema refuses stops with one config-error line naming the key."""
    from splits.cli import main as splits_main

    corpus, _, _ = _bad_corpus(tmp_path / "bad")
    bots = str(REPO / "resources" / "bots.txt")
    config = tmp_path / "config.yaml"

    def run(name: str, *source: str) -> int:
        out = [
            "--out",
            str(tmp_path / f"{name}.parquet"),
            "--report",
            str(tmp_path / f"{name}.json"),
        ]
        argv = ["ingest", "--input", str(corpus), "--shard", "bad", "--bots", bots, *out]
        return splits_main([*argv, *source])

    config.write_text("ingest:\n  chunk_mb: 2\n")
    assert run("hand", "--config", str(config)) == 0
    assert run("rule", "--settings", '{"chunk_mb": 2}') == 0
    assert (tmp_path / "hand.parquet").read_bytes() == (tmp_path / "rule.parquet").read_bytes()
    assert (tmp_path / "hand.json").read_text() == (tmp_path / "rule.json").read_text()
    capsys.readouterr()
    config.write_text("ingest:\n  chunk_mb: 0\n")
    assert run("bad", "--config", str(config)) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "ingest.chunk_mb" in lines[0], lines
    assert not (tmp_path / "bad.parquet").exists()


@pytest.mark.parametrize("held", [1 << 22, 5, 0])
def test_duplicate_finder_held_and_spilled_equal_brute_force(tmp_path, held, monkeypatch):
    """The repeated id hashes, whether held in memory (a small shard), spilled to bucket files
    part-way (the held hashes written out first) or spilled from the first chunk, are the
    repeated values of a brute-force count over all ids of all chunks."""
    from collections import Counter

    from splits.ingest.clean import DuplicateFinder
    from splits.ingest.titles import HASH_SEED

    monkeypatch.setattr(DuplicateFinder, "HELD_HASHES", held)
    chunks = [
        pl.Series([f"p{i % 37}" if i % 5 == 0 else f"u{c}-{i}" for i in range(40)])
        for c in range(6)
    ] + [pl.Series(["u0-1", "lone"]), pl.Series([], dtype=pl.String)]
    finder = DuplicateFinder(tmp_path)
    for ids in chunks:
        finder.add(ids)
    counts = Counter(h for ids in chunks for h in ids.hash(seed=HASH_SEED).to_list())
    expected = sorted(h for h, n in counts.items() if n > 1)
    assert len(expected) > 8
    found = finder.candidates()
    assert found.dtype == pl.UInt64 and sorted(found.to_list()) == expected
    assert (finder.files is None) == (held >= 1 << 22)
    assert not list(tmp_path.iterdir())  # bucket files removed


@pytest.mark.parametrize("scanner", ["polars", "bytes.count"])
def test_count_lines_counts_like_line_ends(monkeypatch, scanner):
    """The blank-line count is lines minus parsed records: the line count must agree with the
    line ends themselves (a last line without one counted), blank and white-space lines,
    CRLF and non-ASCII text included, with polars' line scanner and without it."""
    from splits.ingest import parse

    if scanner == "bytes.count":
        monkeypatch.delattr(pl, "scan_lines", raising=False)
    chunks = [
        b'{"a": 1}\n',
        b'{"a": 1}',
        b'{"a": 1}\n\n',
        b"\n",
        b"\n\n\n",
        b'{"a": 1}\r\n\r\n{"b": 2}',
        b" \n\t\n",
        '{"t": "caf\u00e9 \u2028"}\n{}\n'.encode(),
        b"".join(b'{"id": "%d"}\n' % i if i % 7 else b"\n" for i in range(50_000)),
    ]
    for chunk in chunks:
        oracle = len(chunk.split(b"\n")) - (1 if chunk.endswith(b"\n") else 0)
        assert parse.count_lines(chunk) == oracle, chunk[:40]


def test_chunks_parse_while_the_titles_load(tmp_path, monkeypatch):
    """The parse does not wait for conversations.json: while the titles are still loading,
    the chunks after the first are parsed (a parse that waited would leave the titles reader
    waiting here in vain), and the titles still reach the posts."""
    import threading

    import splits.ingest.read as ingest

    lines = [_line(_utt(f"s{k}", f"s{k}", text=f"root {k} " * 20)) for k in range(200)]
    corpus = _write_corpus(tmp_path / "c", lines, {f"s{k}": f"Title {k}" for k in range(200)})
    parsed = threading.Semaphore(0)
    parse_chunk, read_titles = ingest.parse_chunk, ingest.read_titles

    def counting_parse(*args, **kwargs):
        parsed.release()
        return parse_chunk(*args, **kwargs)

    parsed_before_titles: list[bool] = []

    def slow_titles(source):
        # two chunks parsed before the titles are read; a 20 s wait runs out if they are not
        parsed_before_titles.append(all(parsed.acquire(timeout=20) for _ in range(2)))
        return read_titles(source)

    monkeypatch.setattr(ingest, "parse_chunk", counting_parse)
    monkeypatch.setattr(ingest, "read_titles", slow_titles)
    monkeypatch.setattr(ingest, "IN_FLIGHT", 3)
    report = ingest_shard(
        corpus,
        tmp_path / "p.parquet",
        tmp_path / "r.json",
        schema_defaults(IngestSettings, chunk_mb=0.01),
    )
    assert parsed_before_titles == [True]
    assert report["posts"] == 200
    posts = pl.read_parquet(tmp_path / "p.parquet")
    assert posts.filter(pl.col("post_id") == "s7")["text"].item().startswith("Title 7\n\nroot 7")
