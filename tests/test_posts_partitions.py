"""The posts table as P buckets by author (ingest.buckets; docs/cluster.md): the stable hash
against the formula written here, the per-bucket merge against the single merge on a generated
corpus with planted cross-shard duplicates, [deleted] copies and bots, and the whole DAG with
P = 4 against P = 1 through the real engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import snakemake_fork
from conftest import copy_repo, run_snakemake
from helpers import dry_run_job_counts
from splits.config.settings import schema_defaults
from splits.errors import ConfigError, InputError
from splits.ingest.merge import merge, merge_bucket, reduce_reports
from splits.ingest.partition import BucketWriter, author_buckets, author_hashes, bucket_of
from splits.ingest.read import ingest_shard
from splits.ingest.settings import IngestBucketsSettings, IngestSettings
from test_synth import _generate

INGEST = schema_defaults(IngestSettings)


def bucketed(buckets: int) -> IngestBucketsSettings:
    """The ingest's settings with ingest.buckets = ``buckets`` (each input into bucket files)."""
    return schema_defaults(IngestBucketsSettings, buckets=buckets)


MASK = (1 << 64) - 1


def fnv1a_splitmix(name: str) -> int:
    """The documented hash, written out: FNV-1a 64 of the UTF-8 bytes, SplitMix64 finalizer."""
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & MASK
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & MASK
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & MASK
    return h ^ (h >> 31)


def test_author_hash_is_the_documented_formula():
    # FNV-1a 64's published test vectors, before the finalizer
    def fnv(data: bytes) -> int:
        h = 0xCBF29CE484222325
        for byte in data:
            h = ((h ^ byte) * 0x100000001B3) & MASK
        return h

    assert fnv(b"") == 0xCBF29CE484222325 and fnv(b"a") == 0xAF63DC4C8601EC8C
    assert fnv(b"foobar") == 0x85944171F73967E8
    names = ["", "a", "foobar", "AutoModerator", "Ünïcødé_名前", "x" * 300, "[deleted]"]
    names += [f"user{i}" for i in range(200)]
    series = pl.Series("author", names)
    assert author_hashes(series).tolist() == [fnv1a_splitmix(n) for n in names]
    # a slice (arrow offset), several chunks and a null (hashed as the empty name)
    chunked = pl.concat([series.slice(3, 50), pl.Series("author", [None, "b"])], rechunk=False)
    want = [fnv1a_splitmix(n) for n in names[3:53]] + [fnv1a_splitmix(""), fnv1a_splitmix("b")]
    assert author_hashes(chunked).tolist() == want
    assert author_buckets(series, 7).tolist() == [fnv1a_splitmix(n) % 7 for n in names]
    frame = pl.DataFrame(series).lazy().select(bucket_of(7)).collect(engine="streaming")
    assert frame["author"].to_list() == [fnv1a_splitmix(n) % 7 for n in names]
    # the same in another process (nothing salted by the process)
    code = (
        "import sys, polars as pl; from splits.ingest.partition import author_buckets\n"
        "print(author_buckets(pl.Series(sys.argv[1:]), 5).tolist())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, *names[:20]], capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == str([fnv1a_splitmix(n) % 5 for n in names[:20]])
    counts = pl.Series(
        author_buckets(pl.Series([f"u{i}" for i in range(40_000)]), 8)
    ).value_counts()
    assert counts["count"].min() > 40_000 / 8 * 0.9, "buckets should be about equal"
    with pytest.raises(ConfigError, match="ingest.buckets"):
        author_buckets(series, 0)


def planted_corpus(root: Path) -> tuple[list[Path], dict]:
    """A generated Pushshift corpus (bots included) and, first, a shard of copies: comments of
    both generated shards with changed text (cross-shard duplicates whose first occurrence is
    the copy), copies whose author is [deleted] (dropped at ingest), and a repeat within the
    shard. Returns the input files in order and what was planted."""
    _generate(root, format="pushshift", posts=12_000)
    corpus = sorted((root / "corpus").glob("*.ndjson"))
    copies, planted = [], {"changed": set(), "deleted": 0}
    for path in corpus:
        if not path.name.startswith("RC_"):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[::40]):
            obj = json.loads(line)
            if i % 5 == 0:
                obj["author"] = "[deleted]"
                planted["deleted"] += 1
            else:
                obj["body"] = obj["body"] + " (an earlier copy)"
                planted["changed"].add(obj["id"])
            copies.append(json.dumps(obj))
    copies.append(copies[1])  # a repeat within the shard
    first = root / "corpus" / "RC_copies.ndjson"
    first.write_text("\n".join(copies) + "\n", encoding="utf-8")
    return [first, *corpus], planted


def planted_shards(root: Path) -> tuple[list[str], list[str], dict, list[Path]]:
    """The planted corpus ingested shard by shard: posts and reports, in input order; what was
    planted; the input files."""
    inputs, planted = planted_corpus(root)
    posts, reports = [], []
    for k, path in enumerate(inputs):
        out = root / "shards" / f"{k}.parquet"
        ingest_shard(path, out, out.with_suffix(".json"), INGEST, shard=f"s{k}")
        posts.append(str(out))
        reports.append(str(out.with_suffix(".json")))
    return posts, reports, planted, inputs


def split_file(posts: str | Path, buckets: int, out_dir: Path) -> list[int]:
    """A posts file written as bucket files by BucketWriter (what rule ingest does with the
    posts it cleans), for a shard made by hand."""
    writer = BucketWriter(out_dir, buckets, pl.read_parquet_schema(posts))
    writer.add(pl.read_parquet(posts))
    return writer.close()


def ingest_buckets(inputs: list[Path], buckets: int, work: Path) -> tuple[list[Path], list[str]]:
    """Each input ingested as rule ingest does with ingest.buckets = P: its bucket files
    (a folder per shard) and its report."""
    folders, reports = [], []
    for k, path in enumerate(inputs):
        folder = work / "split" / str(k)
        report = work / "split" / f"{k}.json"
        ingest_shard(path, folder, report, bucketed(buckets), shard=f"s{k}")
        folders.append(folder)
        reports.append(str(report))
    return folders, reports


def bucketed_merge(folders: list[Path], reports: list[str], buckets: int, work: Path) -> dict:
    """The jobs after ingest with ingest.buckets = P as the rules chain them: merge each bucket
    (its file of every shard, in shard order), reduce the reports."""
    bucket_reports = []
    for b in range(buckets):
        parts = [str(folder / f"{b}.parquet") for folder in folders]
        merge_bucket(parts, work / "buckets" / f"{b}.parquet", work / "buckets" / f"{b}.json")
        bucket_reports.append(str(work / "buckets" / f"{b}.json"))
    return reduce_reports(reports, bucket_reports, work / "ingest_report.json")


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    root = tmp_path_factory.mktemp("partitions")
    posts, reports, planted, inputs = planted_shards(root)
    report = merge(posts, reports, root / "posts.parquet", root / "ingest_report.json")
    return root, posts, reports, planted, report, inputs


@pytest.mark.parametrize("buckets", [1, 3, 4])
def test_bucket_merge_equals_the_single_merge(single, tmp_path, buckets):
    root, posts, reports, planted, one, inputs = single
    # the planted corpus exercises what the merge decides
    assert one["merge"]["cross_shard_duplicates"] > 100
    assert one["dropped"]["deleted_author"] >= planted["deleted"] > 5
    assert len(one["merge"]["bots"]) >= 2 and one["merge"]["bot_posts"] > 10
    if buckets == 1:  # the one-table shards, each as one bucket file
        folders = [tmp_path / "split" / str(k) for k in range(len(posts))]
        for path, folder in zip(posts, folders, strict=True):
            split_file(path, 1, folder)
        shard_reports = reports
    else:  # each input ingested straight into its bucket files, as rule ingest does
        folders, shard_reports = ingest_buckets(inputs, buckets, tmp_path)
        # the same counts as the one-table ingest, the repeat within a shard dropped once
        for mine, theirs in zip(shard_reports, reports, strict=True):
            assert json.loads(Path(mine).read_text()) == json.loads(Path(theirs).read_text())
        assert json.loads(Path(shard_reports[0]).read_text())["dropped"]["duplicate_id"] == 1
        for folder, path in zip(folders, posts, strict=True):
            shard = pl.read_parquet(path)
            which = author_buckets(shard["author"], buckets)
            for b in range(buckets):
                part = pl.read_parquet(folder / f"{b}.parquet")
                assert part.equals(shard.filter(pl.Series(which == b))), (folder, b)
    many = bucketed_merge(folders, shard_reports, buckets, tmp_path)
    assert many.pop("buckets") == [
        pl.read_parquet(tmp_path / "buckets" / f"{b}.parquet").height for b in range(buckets)
    ]
    assert many == one
    assert json.loads((tmp_path / "ingest_report.json").read_text()) == {
        **json.loads((root / "ingest_report.json").read_text()),
        "buckets": [pl.scan_parquet(p).select(pl.len()).collect().item()
                    for p in sorted((tmp_path / "buckets").glob("*.parquet"))],
    }  # fmt: skip
    whole = pl.read_parquet(root / "posts.parquet")
    parts = [pl.read_parquet(tmp_path / "buckets" / f"{b}.parquet") for b in range(buckets)]
    assert pl.concat(parts).sort("post_id").equals(whole.sort("post_id"))
    # each bucket holds exactly its authors, in the single table's order
    for b, part in enumerate(parts):
        assert set(author_buckets(part["author"], buckets).tolist()) <= {b}
        mine = whole.filter(pl.Series(author_buckets(whole["author"], buckets) == b))
        assert part.equals(mine)
    # the first occurrence (the copy, in the first shard) is the one kept
    kept = whole.filter(pl.col("post_id").is_in(sorted(planted["changed"])))
    assert kept.height > 100
    assert kept["text"].str.ends_with("(an earlier copy)").all()


def test_bucket_writer_keeps_order_and_writes_empty_buckets(tmp_path):
    frame = pl.DataFrame(
        {"post_id": [str(i) for i in range(20)], "author": ["a", "b"] * 10, "x": range(20)}
    )
    writer = BucketWriter(tmp_path / "out", 6, frame.schema)
    writer.add(frame.head(7))
    writer.add(frame.tail(13))
    rows = writer.close()
    assert sum(rows) == 20 and rows.count(0) == 4  # two authors: four empty buckets
    for b in range(6):
        part = pl.read_parquet(tmp_path / "out" / f"{b}.parquet")
        assert part.schema == frame.schema
        assert part["x"].to_list() == sorted(part["x"].to_list())
    # each row's place in the stream, from its bucket and its row there
    which = author_buckets(frame["author"], 6)
    for b in set(which.tolist()):
        local = np.arange(int((which == b).sum()))
        assert writer.stream_rows(b, local).tolist() == np.flatnonzero(which == b).tolist()
    with pytest.raises(ConfigError, match="ingest.buckets"):
        BucketWriter(tmp_path / "bad", 0, frame.schema)


def test_bucket_writer_in_many_pieces_equals_a_filter(tmp_path, monkeypatch):
    """Small pieces and row groups (the posts come and the buckets are written piece by
    piece): each bucket file is the stream filtered to its authors, in the stream's order."""
    from splits.ingest import partition

    monkeypatch.setattr(partition, "SPLIT_HELD_ROWS", 2_000)
    monkeypatch.setattr(partition, "SPLIT_MIN_GROUP_ROWS", 100)
    monkeypatch.setattr(partition, "FLUSH_BATCH_ROWS", 150)  # batches end inside a flush
    n = 12_345
    frame = pl.DataFrame(
        {"post_id": [f"p{i}" for i in range(n)], "author": [f"a{(i * 7919) % 997}" for i in range(n)],
         "text": [f"text {i}" for i in range(n)]}
    )  # fmt: skip
    writer = BucketWriter(tmp_path / "out", 5, frame.schema)
    for start in range(0, n, 700):
        writer.add(frame.slice(start, 700))
    rows = writer.close()
    which = author_buckets(frame["author"], 5)
    for b in range(5):
        part_path = tmp_path / "out" / f"{b}.parquet"
        assert pl.read_parquet(part_path).equals(frame.filter(pl.Series(which == b)))
        groups = pq.ParquetFile(part_path).metadata.num_row_groups
        assert 1 < groups <= -(-rows[b] // 100), (b, groups)
    assert sum(rows) == n


def test_bucket_writer_holds_a_bounded_number_of_rows_at_many_buckets(tmp_path, monkeypatch):
    """With more buckets than rows per group (a whole dump's P), the rows held for the next row
    groups stay within SPLIT_HELD_ROWS and one piece, not a bucket's minimum group times P."""
    from splits.ingest import partition

    monkeypatch.setattr(partition, "SPLIT_HELD_ROWS", 1_000)
    monkeypatch.setattr(partition, "SPLIT_MIN_GROUP_ROWS", 100)
    monkeypatch.setattr(partition, "FLUSH_BATCH_ROWS", 90)
    n, piece = 20_000, 700
    frame = pl.DataFrame({"post_id": [f"p{i}" for i in range(n)],
                          "author": [f"a{(i * 7919) % 4999}" for i in range(n)]})  # fmt: skip
    writer = BucketWriter(tmp_path / "out", 50, frame.schema)
    most = 0
    for start in range(0, n, piece):
        writer.add(frame.slice(start, piece))
        most = max(most, sum(writer.held))
    assert most <= 1_000 + piece, most
    rows = writer.close()
    which = author_buckets(frame["author"], 50)
    for b in range(50):
        part = pl.read_parquet(tmp_path / "out" / f"{b}.parquet")
        assert part.equals(frame.filter(pl.Series(which == b))) and part.height == rows[b]


def test_a_repeat_under_another_author_is_dropped_as_in_one_table(tmp_path):
    """Within one input, a post id's later copy under another author (another bucket) is
    dropped by the bucketed ingest as by the one-table ingest: the first copy in input order is
    kept, whichever bucket it is in, and the counts are the same."""
    names = [f"user{i}" for i in range(50)]
    which = author_buckets(pl.Series(names), 2).tolist()
    first, second = names[which.index(1)], names[which.index(0)]  # bucket 1, then bucket 0
    record = {"link_id": "t3_c", "created_utc": 1, "subreddit": "s", "parent_id": "t3_c"}
    lines = [
        {**record, "id": "x1", "author": first, "body": "the first copy"},
        {**record, "id": "x2", "author": second, "body": "another post"},
        {**record, "id": "x1", "author": second, "body": "the later copy"},
        {**record, "id": "x2", "author": second, "body": "its repeat"},
    ]
    path = tmp_path / "RC_test.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    one = ingest_shard(path, tmp_path / "one.parquet", tmp_path / "one.json", INGEST)
    two = ingest_shard(path, tmp_path / "two", tmp_path / "two.json", bucketed(2))
    assert one == two and one["dropped"]["duplicate_id"] == 2 and one["posts"] == 2
    kept = pl.read_parquet([tmp_path / "two" / "0.parquet", tmp_path / "two" / "1.parquet"])
    assert sorted(kept["text"].to_list()) == ["another post", "the first copy"]
    assert kept.sort("post_id").equals(pl.read_parquet(tmp_path / "one.parquet").sort("post_id"))
    # the bucket settings with one bucket (as `splits ingest --out-dir` may be given): a folder
    # of one bucket file, the one table's rows and report (it wrote a file named like the folder)
    single = ingest_shard(path, tmp_path / "single", tmp_path / "single.json", bucketed(1))
    assert single == one
    assert sorted(p.name for p in (tmp_path / "single").iterdir()) == ["0.parquet"]
    assert pl.read_parquet(tmp_path / "single" / "0.parquet").equals(
        pl.read_parquet(tmp_path / "one.parquet")
    )


def test_a_post_id_under_two_authors_is_kept_once_per_bucket(tmp_path):
    """The documented condition: copies of a post id meet in one bucket because they share an
    author; a post id under two surviving authors in two buckets is kept twice."""
    names = [f"user{i}" for i in range(50)]
    which = author_buckets(pl.Series(names), 2).tolist()
    a, b = names[which.index(0)], names[which.index(1)]
    rows = {
        "post_id": ["p1", "p1", "p2", "p2"],
        "author": [a, b, a, a],
        "conversation_id": ["c"] * 4,
        "timestamp": [1, 2, 3, 4],
        "text": ["one", "two", "three", "four"],
        "subreddit": ["s"] * 4,
    }
    from splits.ingest.clean import POSTS_SCHEMA

    frame = pl.DataFrame(rows).cast({k: v for k, v in POSTS_SCHEMA.items() if k in rows})
    frame = frame.select(pl.col(c) if c in rows else pl.lit(None, d).alias(c)
                         for c, d in POSTS_SCHEMA.items())  # fmt: skip
    shard = tmp_path / "s.parquet"
    frame.write_parquet(shard)
    report = {"shard": "s", "records": 4, "dropped": {}}
    (tmp_path / "s.json").write_text(json.dumps(report))
    one = merge([str(shard)], [str(tmp_path / "s.json")], tmp_path / "one.parquet", tmp_path / "r")
    split_file(shard, 2, tmp_path / "split")
    two = bucketed_merge([tmp_path / "split"], [str(tmp_path / "s.json")], 2, tmp_path / "two")
    assert one["posts"] == 2 and two["posts"] == 3  # p1 twice: once per author's bucket
    assert two["dropped"]["duplicate_id"] == 1  # p2's copy, same author, same bucket


def test_reduce_checks_its_inputs(single, tmp_path):
    root, posts, reports, _, _, inputs = single
    bucketed_merge(*ingest_buckets(inputs, 2, tmp_path), 2, tmp_path)
    bucket_reports = [str(tmp_path / "buckets" / f"{b}.json") for b in range(2)]
    with pytest.raises(ConfigError, match="judged in two buckets"):
        reduce_reports(reports, [bucket_reports[0]] * 2, tmp_path / "r.json")
    with pytest.raises(ConfigError, match="does not exist"):
        reduce_reports(reports, [str(tmp_path / "nope.json")], tmp_path / "r.json")
    with pytest.raises(ConfigError, match="accounting mismatch.*not of one run"):
        reduce_reports(reports, bucket_reports[:1], tmp_path / "r.json")
    # every bucket empty (all posts of a run dropped): the reduce names the inputs
    empty = {"posts": 0, "bot_posts": 0, "duplicate_id": 0, "bots": {}}
    (tmp_path / "e.json").write_text(json.dumps(empty))
    gone = {"shard": "s", "records": 3, "dropped": {"deleted_author": 3}, "input": "x.ndjson"}
    (tmp_path / "g.json").write_text(json.dumps(gone))
    with pytest.raises(InputError, match="no posts after ingest"):
        reduce_reports([str(tmp_path / "g.json")], [str(tmp_path / "e.json")], tmp_path / "r")


def test_dry_run_with_four_buckets_gives_every_reader_the_buckets(tmp_path):
    work = copy_repo(tmp_path / "repo")
    proc = snakemake_fork.run(
        ["-n", "-p", "--cores", "2", "--config", "ingest={buckets: 4}"], work, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = dry_run_job_counts(proc.stdout)
    assert counts["ingest"] == 2 and "split_posts" not in counts  # ingest writes the buckets
    assert (counts["merge_bucket"], counts["ingest_report"], counts["graph_bucket"]) == (4, 1, 4)
    assert "merge_posts" not in counts and "results/posts/posts.parquet" not in proc.stdout
    buckets = " ".join(f"results/posts/buckets/{b}.parquet" for b in range(4))
    shell = "Shell command: "
    commands = [line[len(shell) :] for line in proc.stdout.splitlines() if line.startswith(shell)]
    readers = [c for c in commands if "results/posts/buckets/0.parquet" in c]
    names = {c.split("splits ")[1].split()[0] for c in readers}
    # the held-out split's threads read the whole dataset, a graph bucket, a group-ness bucket
    # and a D_d part their own; group-ness's reduce reads no post
    assert {"groupness-posts", "groupness-bucket", "hypotheses", "graph-bucket"} <= names
    assert "merge-bucket" in names and "groupness" not in names
    for command in readers:
        if "splits hypotheses" in command:
            assert f"--posts {buckets}" in command, command
        if "splits graph-bucket" in command:
            assert "--posts results/posts/buckets/0.parquet --bucket 0" in command, command
        if "splits groupness-bucket" in command or "splits groupness-posts" in command:
            assert "--posts results/posts/buckets/0.parquet --" in command, command
    keys = _keys(work)
    # per bucket, for every demographic at once: group-ness, D_d's parts and their self-ID
    # phrase search; per demographic one reduce and one self-ID job (verification, curve,
    # threshold)
    per_bucket = ("groupness_bucket", "groupness_posts", "selfid_bucket")
    assert [counts[rule] for rule in per_bucket] == [4] * 3
    assert counts["groupness"] == counts["selfid"] == len(keys) > 1
    # the topic splits' cut: one job per bucket (the job count grows with P), each reading only
    # its bucket's part of every demographic's D_d and writing that bucket's shards
    assert counts["topic_shards"] == 4
    cuts = [c for c in commands if "splits topic-splits shard" in c]
    assert len(cuts) == 4, cuts
    for b in range(4):
        part_of = " ".join(f"results/demographics/{key}/posts/{b}.parquet" for key in keys)
        (cut,) = [c for c in cuts if f"--demographic-posts {part_of} --" in c]
        assert f"--out-dir results/topics/shards/posts/{b} --allow-empty " in cut, cut
        assert cut.count("/posts/") == len(keys) + 1 and f"/posts/{b}.parquet" in cut, cut
    for b in range(4):
        # each demographic's part of the bucket paired with its key and its matches, in order
        part_of = [f"results/demographics/{key}/posts/{b}.parquet" for key in keys]
        (find,) = [c for c in commands if f"selfid find --posts {' '.join(part_of)} " in c]
        matches_of = [f"results/demographics/{key}/selfid/{b}.matches.parquet" for key in keys]
        assert f"--demographic {' '.join(keys)} --out {' '.join(matches_of)} " in find, find
        (write,) = [c for c in commands if f"--out {' '.join(part_of)} " in c]
        assert write.startswith(
            f"POLARS_MAX_THREADS=1 splits groupness-posts --posts results/posts/buckets/{b}.parquet"
        ), write
        # each demographic's users of this bucket only (the reduce writes them)
        users_of = [f"results/demographics/{key}/users/{b}.parquet" for key in keys]
        assert f"--users {' '.join(users_of)} " in write, write
    for key in keys:
        folder = f"results/demographics/{key}"
        (reduce,) = [c for c in commands if f"--out-users {folder}/users.parquet " in c]
        user_parts = " ".join(f"{folder}/users/{b}.parquet" for b in range(4))
        assert f"--out-user-parts {user_parts} " in reduce, reduce
        (selfid,) = [c for c in commands if f"selfid search --users {folder}/" in c]
        matches = " ".join(f"{folder}/selfid/{b}.matches.parquet" for b in range(4))
        user_parts = " ".join(f"{folder}/users/{b}.parquet" for b in range(4))
        # each bucket's matches with its part of the users table, in bucket order
        assert f"--matches {matches} --user-parts {user_parts} --demographics" in selfid, selfid
        assert "--posts" not in selfid, selfid
    assert "demographics/black/posts.parquet" not in proc.stdout


def _outputs(results: Path) -> dict[str, object]:
    """What the two runs must share: the posts as rows sorted by id, the ingest report (less
    the per-bucket counts), the graph's bytes, group-ness tables sorted and reports."""
    buckets = sorted((results / "posts" / "buckets").glob("*.parquet"))
    tables = buckets or [results / "posts" / "posts.parquet"]
    report = json.loads((results / "posts" / "ingest_report.json").read_text())
    assert ("buckets" in report) == bool(buckets)
    report.pop("buckets", None)
    out = {"posts": pl.read_parquet(tables).sort("post_id"), "report": report}
    for name in ("subreddits.parquet", "neighbours.parquet", "summary.json"):
        out[f"graph/{name}"] = (results / "graph" / name).read_bytes()
    for folder in sorted((results / "demographics").iterdir()):
        users = pl.read_parquet(folder / "users.parquet")
        out[f"{folder.name}/users"] = users.sort(users.columns)
        # D_d: one file, or with buckets its parts (one per bucket) read together
        parts = sorted((folder / "posts").glob("*.parquet")) or [folder / "posts.parquet"]
        assert len(parts) == (4 if buckets else 1), parts
        posts = pl.read_parquet(parts)
        out[f"{folder.name}/posts"] = posts.sort(posts.columns)
        out[f"{folder.name}/report"] = json.loads((folder / "groupness_report.json").read_text())
    return out


def test_snakemake_run_with_four_buckets_equals_one(tmp_path, monkeypatch):
    """The real engine on the planted corpus (ingest.inputs): ingest, graph and group-ness of
    every demographic with ingest.buckets = 1 and = 4: the same posts, report, graph bytes and
    group-ness; the shards' bucket files removed."""
    monkeypatch.setenv("SPLITS_SALT", "a test's salt, real inputs need one")
    work = copy_repo(tmp_path / "repo")
    inputs, _ = planted_corpus(work / "planted")
    listed = ", ".join(str(p.relative_to(work)) for p in inputs)
    runs = {}
    for buckets in (1, 4):
        outdir = f"results-{buckets}"
        config = ["synth={enabled: false}", f"ingest={{inputs: [{listed}], buckets: {buckets}}}",
                  f"outdir={outdir}"]  # fmt: skip
        targets = [f"{outdir}/graph/summary.json", f"{outdir}/posts/ingest_report.json"]
        targets += [f"{outdir}/demographics/{key}/groupness_report.json" for key in _keys(work)]
        if buckets > 1:  # D_d's parts (with one bucket the groupness job writes D_d itself)
            targets += [
                f"{outdir}/demographics/{key}/posts/{b}.parquet"
                for key in _keys(work)
                for b in range(buckets)
            ]
        proc = run_snakemake(work, *targets, "--config", *config, timeout=1500)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[buckets] = _outputs(work / outdir)
    assert (work / "logs" / "merge_bucket" / "3.log").exists(), "the bucket jobs did not run"
    assert not list((work / "results-4" / "posts" / "shards").rglob("*/*.parquet"))
    one, four = runs[1], runs[4]
    assert one["report"]["merge"]["cross_shard_duplicates"] > 100
    assert one["report"]["merge"]["bots"]
    assert set(one) == set(four) and len(one) > 8
    for key, value in one.items():
        if isinstance(value, pl.DataFrame):
            assert value.equals(four[key]), key
        else:
            assert value == four[key], key


def _keys(work: Path) -> list[str]:
    from splits.config.definitions import load_demographics

    return [d.key for d in load_demographics(work / "config" / "demographics.sample.yaml")]


def test_the_old_spelling_names_the_new_one():
    from splits.config.schema import validate_config

    with pytest.raises(ConfigError, match=r"^graph\.buckets: unknown key \(now ingest\.buckets\)$"):
        validate_config({"graph": {"buckets": 4}})
    assert validate_config({"ingest": {"buckets": 4}})["ingest"]["buckets"] == 4
    assert validate_config({})["ingest"]["buckets"] == 1
    with pytest.raises(ConfigError, match="ingest.buckets"):
        validate_config({"ingest": {"buckets": 0}})


def test_cli_steps_and_their_one_line_errors(single, tmp_path):
    """The three subcommands the rules run (ingest into bucket files, merge-bucket,
    ingest-report), chained over 2 buckets: the report the single
    merge writes (plus the buckets' posts); bad arguments stop with one line."""
    root, posts, reports, _, _, inputs = single
    cli = [sys.executable, "-m", "splits.cli"]

    def run(*args):
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=300)

    settings = json.dumps({"buckets": 2, "chunk_mb": INGEST.chunk_mb})
    for k, path in enumerate(inputs):
        done = run("ingest", "--input", str(path), "--shard", f"s{k}", "--out-dir",
                   str(tmp_path / "split" / str(k)), "--report", str(tmp_path / f"s{k}.json"),
                   "--settings", settings)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / f"s{k}.json").read_text()) == json.loads(
            Path(reports[k]).read_text()
        )
    for b in range(2):
        parts = [str(tmp_path / "split" / str(k) / f"{b}.parquet") for k in range(len(posts))]
        done = run("merge-bucket", "--posts", *parts, "--out", str(tmp_path / f"{b}.parquet"),
                   "--report", str(tmp_path / f"{b}.json"))  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = run("ingest-report", "--shard-reports", *reports, "--bucket-reports",
               str(tmp_path / "0.json"), str(tmp_path / "1.json"),
               "--report", str(tmp_path / "report.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report.pop("buckets")) == 2
    assert report == json.loads((root / "ingest_report.json").read_text())
    bad = [
        ("ingest", "--input", str(inputs[0]), "--out-dir", str(tmp_path / "x"), "--report",
         str(tmp_path / "x.json"), "--settings", '{"buckets": 0, "chunk_mb": 16}'),
        ("ingest", "--input", str(tmp_path / "nope.ndjson"), "--out-dir", str(tmp_path / "x"),
         "--report", str(tmp_path / "x.json"), "--settings", settings),
        ("ingest", "--input", str(inputs[0]), "--out-dir", str(tmp_path / "x"), "--report",
         str(tmp_path / "x.json"), "--settings", '{"chunk_mb": 16}'),
        ("merge-bucket", "--posts", str(tmp_path / "nope.parquet"), "--out",
         str(tmp_path / "y.parquet"), "--report", str(tmp_path / "y.json")),
        ("ingest-report", "--shard-reports", *reports, "--bucket-reports",
         str(tmp_path / "0.json"), str(tmp_path / "0.json"), "--report", str(tmp_path / "z")),
    ]  # fmt: skip
    for args in bad:
        proc = run(*args)
        assert proc.returncode != 0, args
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists() or not list((tmp_path / "x").iterdir())


def test_threads_read_from_the_bucket_files_equal_the_one_table(single, tmp_path):
    """The held-out split's threads (hypotheses --posts) from P bucket files: the same
    post -> thread map as from the one table."""
    from splits.hypotheses.baseline import read_threads

    root, posts, reports, _, _, inputs = single
    bucketed_merge(*ingest_buckets(inputs, 3, tmp_path), 3, tmp_path)
    whole = root / "posts.parquet"
    ids = pl.read_parquet(whole)["post_id"].gather_every(7)
    one = read_threads(str(whole), ids)
    many = read_threads([str(tmp_path / "buckets" / f"{b}.parquet") for b in range(3)], ids)
    assert one == many and len(one) == ids.len() > 1000
