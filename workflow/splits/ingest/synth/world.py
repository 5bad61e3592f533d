"""The corpus model of the sample generator: its parameters (:class:`SynthParams`) and the
:class:`World` decided per user and per subreddit before any post is written (communities,
seed subreddits, planted change points and marker phrases)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from splits.config.definitions import Demographic, Topic
from splits.errors import ConfigError
from splits.ingest.settings import SynthSettings
from splits.ingest.synth.vocab import (
    BOT_NAME_STEMS,
    CHANGE_POINTS,
    CHATTER_NOUNS,
    DEFAULT_CHANGE_POINT,
    MARKER_ADJECTIVES,
    MARKER_NOUNS,
    USER_STEMS_A,
    USER_STEMS_B,
)


@dataclass(frozen=True, kw_only=True)
class SynthParams:
    """The generator's parameters: the settings of rule ``synth`` (seed, shards, format,
    compression, planted difference; see :meth:`from_settings`) and the sizes and rates of the
    corpus model (this class's defaults: a corpus of about 52,000 posts)."""

    seed: int
    n_general_subreddits: int = 300
    n_general_users: int = 3000
    members_per_demographic: int = 100
    topic_posts_per_pair: int = 190
    general_posts_per_user: float = 5.0
    member_general_posts: float = 14.0
    topic_share_general_users: float = 0.08
    n_bots: int = 12
    bot_posts: int = 60
    n_spam: int = 6
    spam_posts: int = 150
    removed_rate: float = 0.03
    deleted_rate: float = 0.03
    deleted_author_rate: float = 0.03
    empty_rate: float = 0.004
    plant_group_difference: bool
    #: topics with a planted group difference (None: every topic, when plant_group_difference)
    planted_topics: tuple[str, ...] | None
    markers_per_pair: int = 10
    shards: int
    format: str
    compress: bool
    block_users: int = 20000  # users per streamed block (memory; the draws depend on it)

    @staticmethod
    def from_settings(settings: SynthSettings, **model) -> SynthParams:
        """The parameters of rule ``synth``'s settings; ``synth.posts`` scales the corpus
        model's sizes (:meth:`scaled`), ``model`` replaces some of them."""
        values = {
            "seed": settings.seed,
            "shards": settings.shards,
            "format": settings.format,
            "compress": settings.compress,
            "plant_group_difference": settings.plant_group_difference,
            "planted_topics": (
                None if settings.planted_topics is None else tuple(settings.planted_topics)
            ),
        }
        if settings.posts:
            return SynthParams.scaled(settings.posts, **values, **model)
        return SynthParams(**values, **model)

    @staticmethod
    def scaled(n_posts: int, **kwargs) -> SynthParams:
        """Parameters for a corpus of about ``n_posts`` posts (the default is ~50,000)."""
        factor = max(n_posts / 50_000, 0.05)
        sizes = {
            "n_general_subreddits": max(50, int(round(300 * math.sqrt(factor)))),
            "n_general_users": max(200, int(round(3000 * factor))),
            "members_per_demographic": max(20, int(round(100 * factor))),
            "topic_posts_per_pair": max(20, int(round(190 * factor))),
            "n_bots": max(3, int(round(12 * math.sqrt(factor)))),
            "n_spam": max(2, int(round(6 * factor))),
        }
        return SynthParams(**{**sizes, **kwargs})


# --------------------------------------------------------------------------- helpers


def _base36(values: np.ndarray) -> list[str]:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    for v in values.tolist():
        s = ""
        while v:
            v, r = divmod(v, 36)
            s = digits[r] + s
        out.append(s or "0")
    return out


def _fill(template: str, rng: np.random.Generator, bank: dict[str, tuple[str, ...]]) -> str:
    values = {}
    for key in re.findall(r"{(\w+)}", template):
        base = key.rstrip("2").lower()
        word = bank[base][rng.integers(len(bank[base]))]
        values[key] = word.capitalize() if key[0].isupper() else word
    return template.format(**values)


def _inline(phrase: str) -> str:
    """A phrase as it reads inside a sentence ("As a Catholic" -> "as a Catholic")."""
    return (
        phrase
        if phrase.startswith("I ") or phrase.startswith("I'")
        else phrase[0].lower() + phrase[1:]
    )


def _topic_words(topics: list[Topic]) -> set[str]:
    words: set[str] = set()
    for t in topics:
        for kw in t.keywords:
            words.update(re.findall(r"[a-z0-9]+", kw.lower()))
        words.update(re.findall(r"[a-z0-9]+", t.topic.lower()))
    return words


@dataclass
class World:
    """Everything decided per user and per subreddit before posts are generated."""

    subreddits: list[str]
    seed_subreddit_ids: list[np.ndarray]  # per demographic
    general_weights: np.ndarray  # popularity over general subreddit ids
    general_ids: np.ndarray
    user_names: list[str]
    user_kind: np.ndarray  # 0 regular, 1 bot, 2 spam
    user_demo: np.ndarray  # demographic index of members, -1 otherwise
    user_strength: np.ndarray
    noise_mask: np.ndarray  # users x demographics: non-member posting in S_d
    favourites: np.ndarray  # users x 3 general subreddit ids
    n_general: np.ndarray  # general posts per user
    n_topic: np.ndarray  # topic posts per user
    member_seed_counts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (user, sub, count)
    markers: np.ndarray  # demographics x topics x markers_per_pair -> marker phrase id
    shared_markers: np.ndarray  # topics x markers_per_pair
    planted: np.ndarray  # per topic: whether its group difference is planted
    marker_phrases: list[str]
    change_points: dict[str, int]
    n_noise: dict[str, int]


def planted_topic_mask(params: SynthParams, topics: list[Topic]) -> np.ndarray:
    """Per topic, whether its posts carry the planted group difference."""
    if params.planted_topics is None:
        return np.full(len(topics), params.plant_group_difference)
    if not params.plant_group_difference:
        raise ConfigError("synth.planted_topics: needs synth.plant_group_difference: true")
    names = [t.topic for t in topics]
    unknown = sorted(set(params.planted_topics) - set(names))
    if unknown:
        raise ConfigError(f"synth.planted_topics: {unknown[0]!r} is not a topic of topics.file")
    return np.array([name in params.planted_topics for name in names])


def build_world(params: SynthParams, demographics: list[Demographic], topics: list[Topic], rng):
    n_demo = len(demographics)
    if n_demo == 0:
        raise ConfigError("demographics.file: no demographics defined")
    # --- subreddits: general ones (Zipf popularity, floored) and the seed subreddits
    seed_names: list[str] = []
    seed_ids: list[np.ndarray] = []
    for d in demographics:
        ids = []
        for s in d.seed_subreddits:
            name = s.lower()
            if name not in seed_names:
                seed_names.append(name)
            ids.append(seed_names.index(name))
        seed_ids.append(np.array(ids, dtype=np.int64))
    n_gen = params.n_general_subreddits
    taken = set(seed_names)
    general_names = []
    for i in range(n_gen):
        a = MARKER_ADJECTIVES[rng.integers(len(MARKER_ADJECTIVES))]
        b = CHATTER_NOUNS[rng.integers(len(CHATTER_NOUNS))]
        name = f"{a}{b}{i}"
        general_names.append(name)
        taken.add(name)
    subreddits = general_names + seed_names
    seed_ids = [ids + n_gen for ids in seed_ids]
    ranks = np.arange(1, n_gen + 1)
    weights = 1.0 / ranks**1.05
    weights = weights / weights.sum()
    weights = 0.85 * weights + 0.15 / n_gen  # floor: every general subreddit gets some posts
    general_ids = np.arange(n_gen)

    # --- users: general population, members, bots, spam
    m = params.members_per_demographic
    n_regular = params.n_general_users + n_demo * m
    n_users = n_regular + params.n_bots + params.n_spam
    user_kind = np.zeros(n_users, dtype=np.int8)
    user_kind[n_regular : n_regular + params.n_bots] = 1
    user_kind[n_regular + params.n_bots :] = 2
    perm = rng.permutation(n_regular)
    user_demo = np.full(n_users, -1, dtype=np.int64)
    for di in range(n_demo):
        user_demo[perm[di * m : (di + 1) * m]] = di
    user_strength = np.zeros(n_users)
    is_member = user_demo >= 0
    user_strength[is_member] = rng.beta(2.5, 1.5, size=int(is_member.sum()))

    names = []
    for i in range(n_regular):
        a = USER_STEMS_A[rng.integers(len(USER_STEMS_A))]
        b = USER_STEMS_B[rng.integers(len(USER_STEMS_B))]
        style = rng.integers(3)
        names.append(
            f"{a}_{b}{i}"
            if style == 0
            else f"{a.capitalize()}{b.capitalize()}{i}"
            if style == 1
            else f"{a}{b}_{i}"
        )
    names.append("AutoModerator")
    for i in range(1, params.n_bots):
        stem = BOT_NAME_STEMS[(i - 1) % len(BOT_NAME_STEMS)]
        suffix = "" if i <= len(BOT_NAME_STEMS) else str(i)
        names.append(f"{stem}{suffix}Bot" if i % 2 else f"{stem.lower()}{suffix}_bot")
    for i in range(params.n_spam):
        names.append(f"best_deals_{USER_STEMS_B[i % len(USER_STEMS_B)]}{i}")

    # --- noise: non-members of d posting in S_d, planted so that members are 1 - cp/100 of U_d
    noise_mask = np.zeros((n_users, n_demo), dtype=bool)
    change_points: dict[str, int] = {}
    n_noise: dict[str, int] = {}
    for di, d in enumerate(demographics):
        cp = CHANGE_POINTS.get(d.key, DEFAULT_CHANGE_POINT)
        change_points[d.key] = cp
        k = int(round(m * cp / (100 - cp)))
        candidates = np.flatnonzero(user_demo[:n_regular] != di)
        if k > len(candidates):
            raise ConfigError(
                f"synth.n_general_users: too few users ({len(candidates)}) for {k} non-members "
                f"in the seed subreddits of {d.key}"
            )
        noise_mask[rng.choice(candidates, size=k, replace=False), di] = True
        n_noise[d.key] = k

    # --- activity
    favourites = rng.choice(general_ids, size=(n_users, 3), p=weights)
    n_general = np.zeros(n_users, dtype=np.int64)
    base = params.general_posts_per_user
    n_general[:n_regular] = 1 + np.floor(rng.pareto(1.6, n_regular) * base * 0.6).astype(np.int64)
    n_general = np.minimum(n_general, 400)
    n_members = int(is_member.sum())
    member_idx = np.flatnonzero(is_member)
    activity = rng.lognormal(0.0, 0.5, n_members)
    activity /= activity.mean()
    n_general[member_idx] = 3 + rng.poisson(params.member_general_posts * activity)
    n_topic = np.zeros(n_users, dtype=np.int64)
    n_topics = len(topics)
    # members write the per-(d, topic) quota; deleted/removed posts are compensated
    keep = (
        1
        - params.removed_rate
        - params.deleted_rate
        - params.deleted_author_rate
        - params.empty_rate
    )
    per_member = params.topic_posts_per_pair * n_topics / m / max(keep, 0.5)
    n_topic[member_idx] = rng.poisson(per_member * activity)
    general_users = np.flatnonzero((user_kind == 0) & ~is_member)
    n_topic[general_users] = rng.binomial(
        n_general[general_users], params.topic_share_general_users
    )
    n_general[general_users] -= n_topic[general_users]
    n_general[user_kind == 1] = rng.poisson(params.bot_posts, params.n_bots)
    n_general[user_kind == 2] = params.spam_posts + rng.integers(
        0, params.spam_posts, params.n_spam
    )

    member_seed_counts = []
    for di in range(n_demo):
        users = np.flatnonzero(user_demo == di)
        seeds = seed_ids[di]
        s = user_strength[users]
        # number of seed subreddits rises with strength; counts per subreddit too
        n_subs = 1 + rng.binomial(len(seeds) - 1, s)
        rows_u, rows_s, rows_c = [], [], []
        for u, k, st in zip(users.tolist(), n_subs.tolist(), s.tolist(), strict=True):
            chosen = rng.choice(seeds, size=k, replace=False)
            counts = 1 + rng.poisson(1.0 + 5.0 * st, size=k)
            rows_u.extend([u] * k)
            rows_s.extend(chosen.tolist())
            rows_c.extend(counts.tolist())
        member_seed_counts.append(
            (
                np.array(rows_u, dtype=np.int64),
                np.array(rows_s, dtype=np.int64),
                np.array(rows_c, dtype=np.int64),
            )
        )

    # --- planted marker phrases per (demographic, topic), and a shared set per topic
    n_mark = params.markers_per_pair
    need = (n_demo + 1) * n_topics * n_mark
    all_phrases = [f"{a} {b}" for a in MARKER_ADJECTIVES for b in MARKER_NOUNS]
    if need > len(all_phrases):
        raise ConfigError(
            f"synth: too many topics x demographics for the marker vocabulary ({need})"
        )
    chosen = rng.choice(len(all_phrases), size=need, replace=False)
    markers = chosen[: n_demo * n_topics * n_mark].reshape(n_demo, n_topics, n_mark)
    shared = chosen[n_demo * n_topics * n_mark :].reshape(n_topics, n_mark)
    return World(
        planted=planted_topic_mask(params, topics),
        subreddits=subreddits,
        seed_subreddit_ids=seed_ids,
        general_weights=weights,
        general_ids=general_ids,
        user_names=names,
        user_kind=user_kind,
        user_demo=user_demo,
        user_strength=user_strength,
        noise_mask=noise_mask,
        favourites=favourites,
        n_general=n_general,
        n_topic=n_topic,
        member_seed_counts=member_seed_counts,
        markers=markers,
        shared_markers=shared,
        marker_phrases=all_phrases,
        change_points=change_points,
        n_noise=n_noise,
    )
