"""Seed-set expansion (docs/method.md §2.3): pure session logic, decision log, replay, resume, terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.graph import build as graph
from splits.graph import seeds
from splits.graph.settings import GraphSettings
from splits.io import write_parquet

TOP = 10
COMMUNITIES = {"cath": 8, "teach": 6}


def community_posts(seed: int = 3) -> pl.DataFrame:
    """Two communities whose members post in several of their own subreddits and in general
    subreddits; general users post in general subreddits only."""
    rng = np.random.default_rng(seed)
    general = [f"gen{i:02d}" for i in range(30)]
    rows: list[tuple[str, str]] = []
    for prefix, n_subs in COMMUNITIES.items():
        subs = [f"{prefix}{i}" for i in range(n_subs)]
        for u in range(300):
            author = f"{prefix}_user{u}"
            for s in rng.choice(subs, size=rng.integers(2, 5), replace=False):
                rows += [(s, author)] * 2
            for s in rng.choice(general, size=rng.integers(1, 4), replace=False):
                rows.append((s, author))
    for u in range(1500):
        for s in rng.choice(general, size=rng.integers(1, 5), replace=False):
            rows.append((s, f"gen_user{u}"))
    return pl.DataFrame(rows, schema=["subreddit", "author"], orient="row")


@pytest.fixture(scope="module")
def graph_files(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("graph")
    res = graph.compute_graph(
        community_posts().lazy(), schema_defaults(GraphSettings, top_n=1000, min_posts=1, k=20)
    )
    return (
        write_parquet(res.neighbours, out / "neighbours.parquet"),
        write_parquet(res.subreddits, out / "subreddits.parquet"),
    )


@pytest.fixture(scope="module")
def index(graph_files) -> seeds.NeighbourIndex:
    return seeds.NeighbourIndex.from_files(*graph_files, top=TOP)


def oracle(name: str, prefix: str) -> str:
    return "include" if name.startswith(prefix) else "exclude"


def annotate(index, start, prefix, skip=()) -> tuple[seeds.Session, list[tuple[str, str]]]:
    """Drive a session with a truthful annotator; returns it and the (head, candidate) asked."""
    session = seeds.Session(start, index)
    asked = []
    skipped_once: set[str] = set()
    while not session.state.done:
        head, cand = session.state.question
        asked.append((head, cand.name))
        if cand.name in skip and cand.name not in skipped_once:
            skipped_once.add(cand.name)
            session.decide("skip")
        else:
            session.decide(oracle(cand.name, prefix))
    return session, asked


def test_expansion_finds_the_community_and_never_reshows_excluded(index):
    for prefix, n_subs in COMMUNITIES.items():
        session, asked = annotate(index, f"{prefix}0", prefix)
        state = session.state
        assert state.seed_set == sorted(f"{prefix}{i}" for i in range(n_subs))
        assert state.queue == [] and sorted(state.expanded) == state.seed_set
        names = [c for _, c in asked]
        assert len(names) == len(set(names)), "a decided subreddit was asked again"
        assert state.excluded and all(not x.startswith(prefix) for x in state.excluded)
        assert state.n_decisions == len(asked)
        # every shown neighbour of every expanded subreddit was decided
        for head in state.expanded:
            for s in index.shown(head):
                assert s.name in state.status


def test_shown_lists_are_top_by_both_measures(index, graph_files):
    table = pl.read_parquet(graph_files[0])
    shown = index.shown("cath0")
    names = [s.name for s in shown]
    jac = table.filter(subreddit="cath0", measure="jaccard").sort("rank")["neighbour"][:TOP]
    cos = table.filter(subreddit="cath0", measure="cosine").sort("rank")["neighbour"][:TOP]
    assert names[: len(jac)] == jac.to_list()
    assert set(names) == set(jac) | set(cos)
    row = table.filter(subreddit="cath0", measure="jaccard", rank=1).row(0, named=True)
    first = shown[0]
    assert first.overlap == row["overlap"] and first.jaccard == pytest.approx(row["value"])
    assert first.cosine == pytest.approx(
        row["overlap"] / np.sqrt(row["size"] * row["neighbour_size"])
    )


def test_skipped_subreddit_can_come_back_excluded_never(index):
    session, asked = annotate(index, "cath0", "cath", skip={"cath3"})
    names = [c for _, c in asked]
    assert names.count("cath3") == 2, "skipped once, asked again next to another subreddit"
    assert "cath3" in session.state.seed_set
    excluded_at = {}
    for i, (_, name) in enumerate(asked):
        if not name.startswith("cath"):
            excluded_at.setdefault(name, i)
    for name, i in excluded_at.items():
        assert name not in names[i + 1 :]


def test_undo_restores_previous_state(index):
    session = seeds.Session("teach0", index)
    before = session.state
    question = before.question
    session.decide("include")
    assert question[1].name in session.state.status
    dropped = session.undo()
    assert dropped.subreddit == question[1].name
    assert session.state == before
    assert session.undo() is None


def test_replay_is_strict(index):
    session, _ = annotate(index, "cath0", "cath")
    decisions = session.decisions
    assert seeds.replay("cath0", index, decisions).seed_set == session.state.seed_set
    with pytest.raises(ConfigError, match="asks about"):
        seeds.replay("teach0", index, decisions)
    with pytest.raises(ConfigError, match="after the session has ended"):
        seeds.replay("cath0", index, [*decisions, decisions[0]])
    with pytest.raises(ConfigError, match="not a kept subreddit"):
        seeds.replay("nosuchsub", index, [])


def test_effective_decisions_apply_undo():
    events = [
        {"event": "include", "subreddit": "a", "expanding": "s"},
        {"event": "exclude", "subreddit": "b", "expanding": "s"},
        {"event": "undo"},
        {"event": "quit"},
        {"event": "skip", "subreddit": "c", "expanding": "s"},
        {"event": "undo"},
        {"event": "undo"},
        {"event": "undo"},
        {"event": "exclude", "subreddit": "d", "expanding": "s"},
    ]
    assert seeds.effective_decisions(events) == [seeds.Decision("exclude", "d", "s")]


def scripted(answers_for):
    """An ask() that answers by the candidate named in the prompt."""
    asked = []

    def ask(prompt: str) -> str:
        name = re.match(r"r/(\S+)", prompt).group(1)
        asked.append(name)
        return answers_for(name, len(asked))

    return ask, asked


def test_interrupted_session_resumes_where_it_stopped(index, tmp_path):
    full, _ = annotate(index, "cath0", "cath")
    log_path = tmp_path / "decisions.jsonl"
    log = seeds.DecisionLog(log_path)
    log.append({"event": "session", "start": "cath0", "top": TOP, "version": 1})
    session = seeds.Session("cath0", index)

    def first(name, n):
        if n == 3:
            return "u"  # undo the second decision
        if n == 9:
            return "q"
        return "i" if name.startswith("cath") else "e"

    ask, asked1 = scripted(first)
    said: list[str] = []
    assert seeds.interact(session, log, ask, said.append) is False
    log.close()
    stopped_at = session.state.question
    header, events = seeds.read_log(log_path)
    assert header["start"] == "cath0" and events[-1]["event"] == "quit"
    assert any(e["event"] == "undo" for e in events)
    assert asked1[1] == asked1[3] != asked1[2], "after undo the undone subreddit is asked again"

    resumed = seeds.Session("cath0", index, seeds.effective_decisions(events))
    assert resumed.state.question == stopped_at
    assert resumed.state.n_decisions == 6  # 8 answers before quit, one undo, one undone
    ask, asked2 = scripted(lambda name, n: "include" if name.startswith("cath") else "exclude")
    log = seeds.DecisionLog(log_path)
    assert seeds.interact(resumed, log, ask, said.append) is True
    log.close()
    assert asked2[0] == stopped_at[1].name
    assert resumed.state.seed_set == full.state.seed_set
    _, events = seeds.read_log(log_path)
    assert seeds.replay("cath0", index, seeds.effective_decisions(events)).seed_set == (
        full.state.seed_set
    )
    assert any("expanding r/cath0" in line for line in said)


def test_truncated_last_line_is_ignored_and_repaired(index, tmp_path):
    log_path = tmp_path / "log.jsonl"
    session, _ = annotate(index, "teach0", "teach")
    lines = [json.dumps({"event": "session", "start": "teach0", "top": TOP})]
    for d in session.decisions[:4]:
        lines.append(
            json.dumps({"event": d.action, "subreddit": d.subreddit, "expanding": d.expanding})
        )
    log_path.write_text("\n".join(lines) + "\n" + '{"event": "incl')
    _, events = seeds.read_log(log_path)
    assert len(events) == 4
    log = seeds.DecisionLog(log_path)
    log.append({"event": "quit"})
    log.close()
    _, events = seeds.read_log(log_path)
    assert [e["event"] for e in events][-1] == "quit" and len(events) == 5
    log_path.write_text('{"event": "session"}\nnot json\n{"event": "quit"}\n')
    with pytest.raises(ConfigError, match="line 2"):
        seeds.read_log(log_path)


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "splits.cli", "expand-seeds", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_cli_replay_reproduces_seed_set(index, graph_files, tmp_path):
    neighbours, subreddits = graph_files
    session, _ = annotate(index, "teach0", "teach", skip={"teach2"})
    log_path = tmp_path / "shared.jsonl"
    log = seeds.DecisionLog(log_path)
    log.append({"event": "session", "start": "teach0", "top": TOP, "version": 1})
    for d in session.decisions:
        log.append({"event": d.action, "subreddit": d.subreddit, "expanding": d.expanding})
    log.close()
    out = tmp_path / "seeds.txt"
    proc = run_cli("--neighbours", str(neighbours), "--subreddits", str(subreddits))
    assert proc.returncode == 2 and "--log" in proc.stderr
    proc = run_cli(
        "--neighbours", str(neighbours), "--subreddits", str(subreddits),
        "--replay", str(log_path), "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().split() == session.state.seed_set
    assert "complete" in proc.stdout
    # the same log against other neighbour lists (more shown) fails with a clear message
    proc = run_cli(
        "--neighbours", str(neighbours), "--replay", str(log_path), "--out", str(out), "--top", "20"
    )
    assert proc.returncode == 2 and "neighbour lists" in proc.stderr
    assert "Traceback" not in proc.stderr


class Terminal:
    """A child process on a pseudo-terminal, read until a pattern appears."""

    def __init__(self, argv: list[str], cwd: Path):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, close_fds=True
        )
        os.close(slave)
        self.buffer = ""

    def expect(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.buffer)
            if match:
                self.buffer = self.buffer[match.end() :]
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"timed out waiting for {pattern!r}; got {self.buffer[-2000:]!r}"
                )
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(
                        f"process ended before {pattern!r}: {self.buffer[-2000:]!r}"
                    )
                self.buffer += chunk.decode("utf-8", "replace").replace("\r\n", "\n")

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            os.close(self.master)


def test_interactive_session_through_pseudo_terminal(index, graph_files, tmp_path):
    neighbours, subreddits = graph_files
    expected, _ = annotate(index, "cath0", "cath")
    log_path, out = tmp_path / "decisions.jsonl", tmp_path / "seeds.txt"
    argv = [sys.executable, "-m", "splits.cli", "expand-seeds", "--neighbours", str(neighbours)]
    argv += ["--subreddits", str(subreddits), "--start", "cath0", "--log", str(log_path)]
    argv += ["--out", str(out), "--top", str(TOP)]
    prompt = r"r/(\S+)  size \d+, overlap \d+, jaccard [\d.]+, cosine [\d.]+  https://www\.reddit\.com/r/\S+\n.*\[q\]uit > "

    term = Terminal(argv, tmp_path)
    head = term.expect(r"=== expanding r/cath0 \((\d+) users\)")
    assert int(head.group(1)) == index.size("cath0")
    term.expect(r"top \d+ by jaccard")
    term.expect(r"top \d+ by cosine")
    first = term.expect(prompt).group(1)
    term.send("x")  # not a key: asked again
    term.expect("answer i, e, s, u or q")
    assert term.expect(prompt).group(1) == first
    term.send("i" if first.startswith("cath") else "e")
    second = term.expect(prompt).group(1)
    term.send("q")
    term.expect(r"seed set: \d+ subreddits.*partial")
    assert term.close() == 0
    assert first in out.read_text().split() or not first.startswith("cath")

    term = Terminal(argv, tmp_path)
    term.expect("resuming r/cath0: 1 decisions replayed")
    n_questions = 0
    name = term.expect(prompt).group(1)
    assert name == second, "the resumed session asks the question it stopped at"
    excluded: set[str] = set()
    while True:
        n_questions += 1
        assert name not in excluded
        if name.startswith("cath"):
            term.send("i")
        else:
            excluded.add(name)
            term.send("e")
        match = term.expect(prompt + r"|seed set: (\d+) subreddits[^\n]*complete")
        if match.group(1) is None:
            break
        name = match.group(1)
    assert term.close() == 0
    assert int(match.group(2)) == len(expected.state.seed_set)
    assert out.read_text().split() == expected.state.seed_set
    assert n_questions + 1 == expected.state.n_decisions


@pytest.fixture(scope="module")
def synth_graph(tmp_path_factory):
    """The generated sample corpus (splits synth) and its graph, built from the generator's
    post table (subreddit, author); the truth files are read by tests only."""
    out = tmp_path_factory.mktemp("synth")
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "splits.cli", "synth"]
    cmd += ["--demographics", str(repo / "config" / "demographics.sample.yaml")]
    cmd += ["--topics", str(repo / "config" / "topics.yaml")]
    cmd += ["--out", str(out / "corpus"), "--truth-dir", str(out)]
    cmd += ["--config", str(repo / "config" / "config.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    posts = pl.read_parquet(out / "post_truth.parquet", columns=["post_id", "subreddit", "author"])
    meta = json.loads((out / "synth_meta.json").read_text())
    res = graph.compute_graph(
        posts.lazy(), schema_defaults(GraphSettings, top_n=50000, min_posts=20, k=20)
    )
    return res, {d: v["seed_subreddits"] for d, v in meta["demographics"].items()}


def test_synth_seed_sets_are_recovered(synth_graph):
    res, seed_sets = synth_graph
    index = seeds.NeighbourIndex(
        res.neighbours,
        dict(res.subreddits.filter("kept").select("subreddit", "n_users").iter_rows()),
        top=20,
    )
    for demographic, seed_set in seed_sets.items():
        for name in seed_set:
            for measure in ("jaccard", "cosine"):
                top = res.neighbours.filter(pl.col("rank") <= 10, subreddit=name, measure=measure)
                assert set(seed_set) - {name} <= set(top["neighbour"]), (demographic, name, measure)
        session = seeds.Session(seed_set[0], index)
        while not session.state.done:
            session.decide("include" if session.state.question[1].name in seed_set else "exclude")
        assert session.state.seed_set == sorted(seed_set), demographic
