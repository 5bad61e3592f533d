"""Seed-set expansion (docs/method.md §2.3): the annotators' procedure as a terminal program.

Start from one subreddit. For the subreddit at the head of the queue, the annotator sees its top
neighbours by Jaccard and by cosine and decides, for each shown subreddit not decided yet:
include (it joins the seed set and the queue), exclude (never shown again) or skip (undecided:
it may be shown again next to another subreddit). When every shown subreddit of the head has
been answered, the next subreddit of the queue is expanded; the session ends with an empty
queue. The seed set is the start plus every included subreddit.

The logic is pure: the session state is a function of the start, the neighbour lists and the
list of decisions (``replay``). Every decision is appended (and flushed) to a JSONL log as it is
made, so a session can stop at any point and resume where it stopped, ``undo`` just drops the
last decision, and a log replays non-interactively into the same seed set (``--replay``).
Replay is strict: each logged decision must be about the subreddit the session asks about at
that point, otherwise the neighbour lists have changed and replay stops with an error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from splits.errors import ConfigError
from splits.io import write_text

ACTIONS = ("include", "exclude", "skip")
KEYS = {"i": "include", "e": "exclude", "s": "skip", "u": "undo", "q": "quit"}
DEFAULT_TOP = 20
LOG_VERSION = 1


def reddit_link(name: str) -> str:
    return f"https://www.reddit.com/r/{name}"


# --------------------------------------------------------------------------- neighbour lists


@dataclass(frozen=True)
class Shown:
    """One subreddit shown next to the subreddit being expanded."""

    name: str
    size: int
    overlap: int
    jaccard: float
    cosine: float
    jaccard_rank: int | None
    cosine_rank: int | None


class NeighbourIndex:
    """The graph stage's neighbour lists, looked up per subreddit (lower-cased names)."""

    def __init__(self, neighbours: pl.DataFrame, sizes: dict[str, int], top: int = DEFAULT_TOP):
        required = {
            "subreddit",
            "measure",
            "rank",
            "neighbour",
            "overlap",
            "size",
            "neighbour_size",
        }
        missing = required - set(neighbours.columns)
        if missing:
            raise ConfigError(f"neighbours table lacks column(s) {sorted(missing)}")
        if top < 1:
            raise ConfigError(f"--top: must be at least 1, got {top}")
        self.top = top
        self.table = neighbours.filter(pl.col("rank") <= top).sort("subreddit", "measure", "rank")
        self.sizes = dict(sizes)
        for row in self.table.select("subreddit", "size").unique().iter_rows():
            self.sizes.setdefault(row[0], row[1])
        self._cache: dict[str, list[Shown]] = {}

    @classmethod
    def from_files(
        cls, neighbours: str | Path, subreddits: str | Path | None, top: int = DEFAULT_TOP
    ) -> NeighbourIndex:
        for key, path in (("--neighbours", neighbours), ("--subreddits", subreddits)):
            if path is not None and not Path(path).exists():
                raise ConfigError(f"{key}: input {path} does not exist")
        sizes: dict[str, int] = {}
        if subreddits is not None:
            subs = pl.read_parquet(subreddits, columns=["subreddit", "n_users", "kept"])
            sizes = dict(subs.filter("kept").select("subreddit", "n_users").iter_rows())
        return cls(pl.read_parquet(neighbours), sizes, top)

    def __contains__(self, name: str) -> bool:
        return name in self.sizes

    def size(self, name: str) -> int:
        return int(self.sizes.get(name, 0))

    def shown(self, name: str) -> list[Shown]:
        """Top ``top`` by Jaccard (in rank order), then the top ``top`` by cosine not already
        listed (in rank order)."""
        if name not in self._cache:
            rows = self.table.filter(pl.col("subreddit") == name)
            ranks: dict[str, dict[str, int]] = {}
            info: dict[str, tuple[int, int, int]] = {}
            order: list[str] = []
            for measure in ("jaccard", "cosine"):
                for r in rows.filter(pl.col("measure") == measure).iter_rows(named=True):
                    nb = r["neighbour"]
                    ranks.setdefault(nb, {})[measure] = r["rank"]
                    if nb not in info:
                        info[nb] = (r["size"], r["neighbour_size"], r["overlap"])
                        order.append(nb)
            out = []
            for nb in order:
                a, b, o = info[nb]
                out.append(
                    Shown(
                        name=nb,
                        size=b,
                        overlap=o,
                        jaccard=o / (a + b - o) if a + b - o else 0.0,
                        cosine=o / math.sqrt(a * b) if a * b else 0.0,
                        jaccard_rank=ranks[nb].get("jaccard"),
                        cosine_rank=ranks[nb].get("cosine"),
                    )
                )
            self._cache[name] = out
        return self._cache[name]


# --------------------------------------------------------------------------- pure session logic


@dataclass(frozen=True)
class Decision:
    action: str  # include | exclude | skip
    subreddit: str
    expanding: str


@dataclass
class SessionState:
    start: str
    status: dict[str, str] = field(default_factory=dict)  # subreddit -> include | exclude
    included: list[str] = field(default_factory=list)  # in order of inclusion, start first
    queue: list[str] = field(default_factory=list)  # still to expand, head first
    expanded: list[str] = field(default_factory=list)
    question: tuple[str, Shown] | None = None  # (subreddit being expanded, candidate)
    position: int = 0  # index of the candidate among the head's shown subreddits
    n_decisions: int = 0

    @property
    def done(self) -> bool:
        return self.question is None

    @property
    def seed_set(self) -> list[str]:
        return sorted(self.included)

    @property
    def excluded(self) -> list[str]:
        return sorted(s for s, v in self.status.items() if v == "exclude")


class ReplayMismatch(ConfigError):
    """A logged decision does not fit the session (other neighbour lists or start)."""


def replay(start: str, index: NeighbourIndex, decisions: Iterable[Decision]) -> SessionState:
    """The session state after ``decisions``, from ``start``: pure and deterministic."""
    start = start.lower()
    if start not in index:
        raise ConfigError(f"--start: subreddit {start!r} is not a kept subreddit of the graph")
    state = SessionState(start=start, status={start: "include"}, included=[start], queue=[start])
    pending = iter(enumerate(decisions, start=1))
    while state.queue:
        head = state.queue[0]
        for position, cand in enumerate(index.shown(head)):
            if cand.name in state.status:
                continue
            nxt = next(pending, None)
            if nxt is None:
                state.question = (head, cand)
                state.position = position
                return state
            number, decision = nxt
            if decision.subreddit != cand.name or decision.expanding != head:
                raise ReplayMismatch(
                    f"decision {number} is about r/{decision.subreddit} (expanding "
                    f"r/{decision.expanding}) but the session asks about r/{cand.name} "
                    f"(expanding r/{head}): the neighbour lists or the start differ from the log's"
                )
            if decision.action not in ACTIONS:
                raise ReplayMismatch(f"decision {number}: unknown action {decision.action!r}")
            state.n_decisions = number
            if decision.action == "include":
                state.status[cand.name] = "include"
                state.included.append(cand.name)
                state.queue.append(cand.name)
            elif decision.action == "exclude":
                state.status[cand.name] = "exclude"
        state.expanded.append(state.queue.pop(0))
    extra = next(pending, None)
    if extra is not None:
        raise ReplayMismatch(
            f"decision {extra[0]} (r/{extra[1].subreddit}) comes after the session has ended"
        )
    return state


def effective_decisions(events: Iterable[dict]) -> list[Decision]:
    """Decisions of a log after applying its undo events (each drops the last decision)."""
    stack: list[Decision] = []
    for event in events:
        kind = event.get("event")
        if kind in ACTIONS:
            stack.append(Decision(kind, event["subreddit"], event["expanding"]))
        elif kind == "undo" and stack:
            stack.pop()
    return stack


class Session:
    """A session: start, neighbour lists and decisions; ``state`` is always ``replay`` of them."""

    def __init__(self, start: str, index: NeighbourIndex, decisions: list[Decision] | None = None):
        self.start = start.lower()
        self.index = index
        self.decisions = list(decisions or [])
        self.state = replay(self.start, index, self.decisions)

    def decide(self, action: str) -> Decision:
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        if self.state.question is None:
            raise ValueError("the session has ended: nothing to decide")
        head, cand = self.state.question
        decision = Decision(action, cand.name, head)
        self.decisions.append(decision)
        self.state = replay(self.start, self.index, self.decisions)
        return decision

    def undo(self) -> Decision | None:
        if not self.decisions:
            return None
        dropped = self.decisions.pop()
        self.state = replay(self.start, self.index, self.decisions)
        return dropped


# --------------------------------------------------------------------------- decision log


def read_log(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, events) of a JSONL decision log; a missing or empty file has neither."""
    path = Path(path)
    header: dict = {}
    events: list[dict] = []
    if not path.exists():
        return header, events
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((i for i, line in enumerate(lines, start=1) if line.strip()), default=0)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as err:
            if number == last and number > 1:
                print(f"{path}: ignoring the cut-off last line {number}", file=sys.stderr)
                break
            raise ConfigError(f"{path}: line {number} is not valid JSON ({err.msg})") from err
        if not isinstance(event, dict) or "event" not in event:
            raise ConfigError(f"{path}: line {number} has no 'event' key")
        if event["event"] in ACTIONS and not {"subreddit", "expanding"} <= set(event):
            raise ConfigError(f"{path}: line {number} lacks 'subreddit' or 'expanding'")
        if event["event"] == "session":
            header = event
        else:
            events.append(event)
    return header, events


class DecisionLog:
    """Append-only JSONL log; every line is flushed and synced when written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                # a line cut short by a crash: drop it before appending (read_log ignores it)
                with open(self.path, "r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
        self._fh = open(self.path, "a", encoding="utf-8")

    def append(self, event: dict) -> None:
        event = {**event, "time": datetime.now(UTC).isoformat(timespec="seconds")}
        self._fh.write(json.dumps(event, sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


# --------------------------------------------------------------------------- terminal I/O


def _status_mark(state: SessionState, name: str) -> str:
    return {"include": "+", "exclude": "-"}.get(state.status.get(name, ""), " ")


def render_head(session: Session, head: str) -> str:
    state, index = session.state, session.index
    shown = index.shown(head)
    lines = [
        "",
        f"=== expanding r/{head} ({index.size(head)} users)  {reddit_link(head)}",
        f"    seed set {len(state.included)}, excluded {len(state.excluded)}, "
        f"queue {len(state.queue) - 1} after this one, decisions {state.n_decisions}",
    ]
    for measure in ("jaccard", "cosine"):
        ranked = sorted(
            (s for s in shown if getattr(s, f"{measure}_rank") is not None),
            key=lambda s: getattr(s, f"{measure}_rank"),
        )
        lines.append(f"--- top {len(ranked)} by {measure}  (+ included, - excluded)")
        lines.append(
            f"    {'#':>3} {'subreddit':<28} {'size':>9} {'overlap':>8} {'jaccard':>8} {'cosine':>8}"
        )
        for s in ranked:
            lines.append(
                f"  {_status_mark(state, s.name)} {getattr(s, f'{measure}_rank'):>3} "
                f"{s.name:<28} {s.size:>9} {s.overlap:>8} {s.jaccard:>8.4f} {s.cosine:>8.4f}  "
                f"{reddit_link(s.name)}"
            )
    return "\n".join(lines)


def render_question(session: Session) -> str:
    assert session.state.question is not None
    head, cand = session.state.question
    return (
        f"r/{cand.name}  size {cand.size}, overlap {cand.overlap}, jaccard {cand.jaccard:.4f}, "
        f"cosine {cand.cosine:.4f}  {reddit_link(cand.name)}\n"
        "  [i]nclude [e]xclude [s]kip [u]ndo [q]uit > "
    )


def interact(
    session: Session,
    log: DecisionLog,
    ask: Callable[[str], str],
    say: Callable[[str], None],
) -> bool:
    """Ask until the queue is empty (True) or the annotator quits (False)."""
    shown_head = None
    while session.state.question is not None:
        head, _ = session.state.question
        if head != shown_head:
            say(render_head(session, head))
            shown_head = head
        try:
            answer = ask(render_question(session)).strip().lower()
        except (EOFError, KeyboardInterrupt):  # end of input or Ctrl-C: quit, resumable
            say("")
            answer = "q"
        action = KEYS.get(answer[:1]) if answer else None
        if action is None or (len(answer) > 1 and answer not in (action, action[:1])):
            say(f"  '{answer}': answer i, e, s, u or q")
            continue
        if action == "quit":
            log.append({"event": "quit"})
            return False
        if action == "undo":
            dropped = session.undo()
            if dropped is None:
                say("  nothing to undo")
                continue
            log.append({"event": "undo"})
            say(f"  undone: {dropped.action} r/{dropped.subreddit}")
            shown_head = None
            continue
        decision = session.decide(action)
        log.append(
            {"event": action, "subreddit": decision.subreddit, "expanding": decision.expanding}
        )
    return True


def write_seed_set(state: SessionState, path: str | Path) -> Path:
    return write_text("".join(f"{name}\n" for name in state.seed_set), path)


def summary_text(state: SessionState, out: str | Path) -> str:
    status = "complete (queue empty)" if state.done else f"partial ({len(state.queue)} queued)"
    return (
        f"seed set: {len(state.seed_set)} subreddits, {len(state.excluded)} excluded, "
        f"{state.n_decisions} decisions, {status}; written to {out}\n"
        f"seed_subreddits: [{', '.join(state.seed_set)}]"
    )


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--neighbours", required=True, help="results/graph/neighbours.parquet")
    parser.add_argument("--subreddits", help="results/graph/subreddits.parquet (sizes, names)")
    parser.add_argument("--start", help="the start subreddit (default: the log's)")
    parser.add_argument("--log", help="JSONL decision log: appended to, resumed from if present")
    parser.add_argument("--replay", help="replay this decision log non-interactively")
    parser.add_argument("--out", required=True, help="seed set: one subreddit per line")
    parser.add_argument(
        "--top",
        type=int,
        help=f"neighbours shown per measure (default: the log's, else {DEFAULT_TOP})",
    )


def _resolve_start(args: argparse.Namespace, header: dict, source: str) -> str:
    logged = header.get("start")
    if args.start and logged and args.start.lower() != logged:
        raise ConfigError(f"--start {args.start} differs from the start r/{logged} of {source}")
    start = args.start or logged
    if not start:
        raise ConfigError("--start: required (the decision log names no start)")
    return start.lower()


def run(args: argparse.Namespace) -> int:
    if not args.log and not args.replay:
        raise ConfigError("--log: required for an interactive session (or give --replay FILE)")
    source = args.replay or args.log
    if args.replay and not Path(args.replay).exists():
        raise ConfigError(f"--replay: input {args.replay} does not exist")
    header, events = read_log(source)
    top = args.top or header.get("top") or DEFAULT_TOP
    index = NeighbourIndex.from_files(args.neighbours, args.subreddits, top)
    start = _resolve_start(args, header, source)
    session = Session(start, index, effective_decisions(events))

    if args.replay:
        write_seed_set(session.state, args.out)
        print(summary_text(session.state, args.out))
        return 0

    log = DecisionLog(args.log)
    try:
        if not header:
            log.append({"event": "session", "start": start, "top": top, "version": LOG_VERSION})
        elif events:
            print(
                f"resuming r/{start}: {session.state.n_decisions} decisions replayed from {args.log}"
            )
        print(
            "For each subreddit: i = include (joins the seed set and the queue), e = exclude "
            "(never shown again), s = skip (decide later), u = undo the last decision, q = quit "
            "(resume later with the same --log)."
        )
        interact(session, log, ask=input, say=print)
    finally:
        log.close()
    write_seed_set(session.state, args.out)
    print(summary_text(session.state, args.out))
    sys.stdout.flush()
    return 0
