"""The sample corpus generator (``splits synth``).

A deterministic synthetic Reddit corpus in ConvoKit's on-disk format (v1) or as Pushshift
NDJSON, with the ground truth every later stage can be scored against:

- a few hundred general subreddits with Zipf popularity; heavy-tailed user activity; every user
  has a few favourite subreddits and posts in several;
- one community per demographic of the demographics file: members (``strength`` in [0, 1]) post
  in the community's seed subreddits (more posts, in more of them, with higher strength) and a
  lot in general subreddits; non-members post in seed subreddits rarely (one or two posts), in
  such numbers that the share of true members among the users of the seed subreddits is
  ``1 - change_point / 100`` (change points 75/80/90 as in the paper's thresholds);
- self-ID phrases in members' posts at a rate rising with strength, anti-self-ID phrases mostly
  from non-members, and phrase occurrences that are not self-identifications (quoted, reported
  questions, negations, hypotheticals), each labelled in ``post_truth.parquet``;
- neutral topic posts using the keywords of the topic list, with a planted per-(demographic,
  topic) set of marker phrases (``plant_group_difference``; when off every author draws markers
  from one shared distribution; ``planted_topics`` limits the planted difference to some topics,
  the others draw from the shared distribution, and ``synth_meta.json`` lists them);
- bots (AutoModerator and ``...bot``/``...Bot`` accounts with templated text), spam accounts
  (very many repetitive posts), ``[deleted]``/``[removed]``/empty texts and ``[deleted]``
  authors in proportions like real ConvoKit corpora.

Posts are generated per block of users and streamed to disk, so memory is bounded by the block
size whatever the corpus size. Every random draw comes from one ``numpy`` Generator seeded from
``--seed``: the same arguments give byte-identical files.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.definitions import Demographic, Topic, load_demographics, load_topics
from splits.errors import ConfigError
from splits.io import remove_stale_temporaries, write_json, write_parquet

log = logging.getLogger(__name__)

# planted change points (percentile of group-ness from which U_d is mostly true members),
# as the paper's released thresholds; other demographics get DEFAULT_CHANGE_POINT.
CHANGE_POINTS = {
    "teacher": 75,
    "catholic": 75,
    "black": 75,
    "hindu_jain_sikh": 80,
    "construction": 90,
    "jewish": 90,
}
DEFAULT_CHANGE_POINT = 75

TIME_START = 1325376000  # 2012-01-01
TIME_END = 1546300799  # 2018-12-31
ID_OFFSET = 36**5  # post ids look like reddit's base-36 ids ("o0ss4")
SUBMISSION_SHARE = 0.15  # share of posts that start a conversation

# --------------------------------------------------------------------------- vocabulary

CHATTER_NOUNS = (
    "weekend morning evening neighbour landlord apartment commute traffic weather coffee tea "
    "breakfast lunch dinner sandwich pizza burger couch window door car bike bus train airport "
    "phone laptop charger headphones podcast movie series episode song album concert festival "
    "ticket party birthday wedding cousin brother sister friend roommate coworker boss meeting "
    "email deadline shift paycheck rent bill store mall parking street corner park dog cat "
    "puppy kitten hamster vacation trip hotel beach mountain lake river snow rain storm summer "
    "winter spring autumn jacket shoes shirt haircut dentist doctor appointment package "
    "delivery neighbourhood city town village bridge tower museum library bakery diner"
).split()
CHATTER_ADJECTIVES = (
    "weird great terrible amazing boring funny strange annoying lovely awkward quiet loud "
    "cheap expensive early late tiny huge random classic decent solid rough chill busy lazy "
    "rainy sunny cold warm fresh old new honest wild calm"
).split()
CHATTER_VERBS = (
    "saw found missed fixed lost bought sold tried watched heard visited cleaned moved "
    "borrowed painted ordered forgot skipped booked cancelled"
).split()
CHATTER_ADVERBS = (
    "honestly basically literally apparently probably definitely seriously actually totally really"
).split()
CHATTER_TEMPLATES = (
    "I {verb} a {adj} {noun} yesterday and it was {adj2}.",
    "My {noun} is {adverb} {adj} this week.",
    "Anyone else think the {noun} near the {noun2} is {adj}?",
    "We {verb} the {noun} after the {noun2}, {adverb} {adj}.",
    "The {noun} was {adj} but the {noun2} was {adverb} {adj2}.",
    "Not gonna lie, that {noun} looks {adj}.",
    "{Adverb} the {adj} {noun} is the best part of the {noun2}.",
    "Lol my {noun} {verb} the {noun2} again.",
    "This reminds me of the {adj} {noun} my {noun2} {verb} last year.",
    "Same thing happened with my {noun}, {adverb} {adj2}.",
)
TITLE_TEMPLATES = (
    "Question about my {noun}",
    "The {adj} {noun} thread",
    "Anyone else {verb} a {noun} today?",
    "{Adj} {noun}, {adj2} {noun2}",
    "So my {noun} happened",
    "PSA about the {noun}",
)
# marker vocabulary: planted per (demographic, topic) phrases ("adjective noun")
MARKER_ADJECTIVES = (
    "amber velvet granite copper misty crimson silver hollow golden rusty quiet bright "
    "frosty dusty ivory cobalt mellow humble brisk gentle rugged scarlet olive lunar "
    "coral hazel stormy smoky breezy marble sandy wooden woolly paper glassy polished "
    "faded vivid tidy salty"
).split()
MARKER_NOUNS = (
    "lantern harbor meadow compass orchard ladder kettle canyon quilt anchor pebble "
    "thicket beacon saddle lagoon attic chimney tapestry prairie violin drumbeat ember "
    "glacier harvest marina parlor satchel tundra willow ribbon cottage bonfire "
    "horizon parade riddle sparrow tunnel vineyard whistle fountain"
).split()
TOPIC_TEMPLATES = (
    "Been thinking a lot about {kw1} lately, especially {kw2}.",
    "Quick question on {kw1}: how do you handle {kw2}?",
    "My take on {kw1} is that {kw2} matters more than people think.",
    "Spent the whole day on {kw1} and {kw2}.",
    "Anyone have advice about {kw1}? Also {kw2} and {kw3}.",
    "Here is what I learned about {kw1}, {kw2} and {kw3}.",
)
MARKER_TEMPLATES_BY_COUNT = {
    1: ("For me it always comes back to {m1}.", "It all started with {m1}."),
    2: ("Nothing beats {m1} and {m2} for this.", "Think {m1}, maybe {m2}."),
    3: ("I keep bringing up {m1}, {m2} and {m3} with my friends.",),
}
PHRASE_TEMPLATES = {
    "selfid": (
        "{P}, so this hits home for me.",
        "For what it's worth, {p}.",
        "{P} and I have thought about this a lot.",
        "Honestly {p}, and this is how it looks from here.",
    ),
    "anti_selfid": (
        "{P}, so I see it a bit differently.",
        "For the record, {p}.",
        "{P} and I still find this interesting.",
    ),
    "selfid_quoted": (
        "My mom always says '{P}' but I never bought it.",
        'He kept telling everyone "{P}" at the party.',
        "The sign literally said '{P}' which was odd.",
    ),
    "selfid_question": (
        "Did he really say {p}?",
        "Why does my coworker keep saying {p}?",
        "Would anyone here actually say {p}?",
    ),
    "selfid_negated": (
        "It's not like {p} or anything.",
        "I never said {p}.",
        "Nobody would claim {p} about me.",
    ),
    "selfid_hypothetical": (
        "If {p}, I would be more careful about this.",
        "Imagine if {p}, that would be something.",
        "Even if {p} it would not change much.",
    ),
}
PHRASE_KINDS = tuple(PHRASE_TEMPLATES)  # order matters: kind codes below
BOT_TEMPLATES = (
    "Your submission has been removed because it does not meet the minimum length of {n} "
    "characters. *I am a bot, and this action was performed automatically. Please contact the "
    "moderators of this subreddit if you have any questions or concerns.*",
    "Reminder: rule {n} applies in this thread. *I am a bot, and this action was performed "
    "automatically.*",
    "I will be messaging you in {n} days to remind you of this link. ^(I am a bot)",
    "{n} degrees Fahrenheit is about {m} degrees Celsius. ^(beep boop, I am a bot)",
    "Here is a summary of the linked page ({n}% shorter). ^(I am a bot | feedback welcome)",
)
BOT_NAME_STEMS = (
    "Remind",
    "WikiText",
    "Converter",
    "Summarize",
    "Haiku",
    "Sneaky",
    "Gif",
    "Tweet",
    "Stabilizer",
    "Quote",
    "Timezone",
    "Link",
)
SPAM_TEMPLATES = (
    "CHECK OUT my channel for the best {adj} {noun} deals!!! link in bio",
    "Free {noun} giveaway!!! follow and share, {adj} deals every day",
    "Earn money from home with {adj} {noun} tips, DM me now!!!",
)
USER_STEMS_A = (
    "blue red green happy lazy silent quick brave clever dark bright lucky sleepy cosmic "
    "rusty salty spicy funky mighty little big old young wild"
).split()
USER_STEMS_B = (
    "panda tiger falcon otter walrus badger turtle fox wolf raven moose koala lemur "
    "penguin gecko bison heron mango pickle waffle noodle taco muffin"
).split()

KIND_GENERAL, KIND_TOPIC, KIND_BOT, KIND_SPAM = 0, 1, 2, 3
KIND_PHRASE0 = 4  # + index in PHRASE_KINDS
KIND_NAMES = ("general", "topic", "bot", "spam") + PHRASE_KINDS

DIRT_NAMES = ("none", "removed", "deleted", "deleted_author", "empty")


@dataclass(frozen=True)
class SynthParams:
    seed: int = 20250408
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
    plant_group_difference: bool = True
    #: topics with a planted group difference (None: every topic, when plant_group_difference)
    planted_topics: tuple[str, ...] | None = None
    markers_per_pair: int = 10
    shards: int = 2
    format: str = "convokit"
    compress: bool = False
    block_users: int = 20000

    @staticmethod
    def scaled(n_posts: int, **kwargs) -> SynthParams:
        """Parameters for a corpus of about ``n_posts`` posts (the default is ~50,000)."""
        factor = max(n_posts / 50_000, 0.05)
        return SynthParams(
            n_general_subreddits=max(50, int(round(300 * math.sqrt(factor)))),
            n_general_users=max(200, int(round(3000 * factor))),
            members_per_demographic=max(20, int(round(100 * factor))),
            topic_posts_per_pair=max(20, int(round(190 * factor))),
            n_bots=max(3, int(round(12 * math.sqrt(factor)))),
            n_spam=max(2, int(round(6 * factor))),
            **kwargs,
        )


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


# --------------------------------------------------------------------------- posts of a block


@dataclass
class PostBlock:
    author: np.ndarray
    subreddit: np.ndarray
    kind: np.ndarray  # KIND_* codes
    topic: np.ndarray  # topic index or -1
    phrase_demo: np.ndarray  # demographic whose phrase list a phrase post uses, or -1
    noise_seed: np.ndarray  # a non-member's post in S_d: exempt from dirt (keeps U_d planted)


def _block_posts(
    world: World, users: np.ndarray, params: SynthParams, n_demo: int, rng
) -> PostBlock:
    authors, subs, kinds, topic, pdemo, noise_seed = [], [], [], [], [], []
    n_topics = world.markers.shape[1]

    def add(a, s, k, t, p, ns):
        authors.append(a)
        subs.append(s)
        kinds.append(k)
        topic.append(t)
        pdemo.append(p)
        noise_seed.append(ns)

    in_block = np.zeros(len(world.user_names), dtype=bool)
    in_block[users] = True
    # general and topic posts: 60% in a favourite subreddit, the rest by popularity
    for count, is_topic in ((world.n_general, False), (world.n_topic, True)):
        a = np.repeat(users, count[users])
        n = len(a)
        fav = world.favourites[a, rng.integers(0, 3, n)]
        pop = rng.choice(world.general_ids, size=n, p=world.general_weights)
        s = np.where(rng.random(n) < 0.6, fav, pop)
        k = np.full(n, KIND_TOPIC if is_topic else KIND_GENERAL, dtype=np.int64)
        t = rng.integers(0, n_topics, n) if is_topic else np.full(n, -1, dtype=np.int64)
        uk = world.user_kind[a]
        k[uk == 1] = KIND_BOT
        k[uk == 2] = KIND_SPAM
        add(a, s, k, t, np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool))
    # members' seed posts
    for di in range(n_demo):
        u, s, c = world.member_seed_counts[di]
        sel = in_block[u]
        a = np.repeat(u[sel], c[sel])
        n = len(a)
        add(
            a,
            np.repeat(s[sel], c[sel]),
            np.full(n, KIND_GENERAL),
            np.full(n, -1),
            np.full(n, -1),
            np.zeros(n, dtype=bool),
        )
    # non-members' seed posts (noise): one post (two for 15%) in one seed subreddit
    for di in range(n_demo):
        u = users[world.noise_mask[users, di]]
        c = 1 + (rng.random(len(u)) < 0.15)
        a = np.repeat(u, c)
        n = len(a)
        seeds = world.seed_subreddit_ids[di]
        s = np.repeat(seeds[rng.integers(0, len(seeds), len(u))], c)
        add(a, s, np.full(n, KIND_GENERAL), np.full(n, -1), np.full(n, -1), np.ones(n, dtype=bool))

    block = PostBlock(
        author=np.concatenate(authors),
        subreddit=np.concatenate(subs),
        kind=np.concatenate(kinds).astype(np.int64),
        topic=np.concatenate(topic).astype(np.int64),
        phrase_demo=np.concatenate(pdemo).astype(np.int64),
        noise_seed=np.concatenate(noise_seed),
    )
    _assign_phrases(world, block, n_demo, rng)
    return block


def _assign_phrases(world: World, block: PostBlock, n_demo: int, rng) -> None:
    """Turn some general posts into self-ID / anti-self-ID / non-self-ID phrase posts."""
    general = block.kind == KIND_GENERAL
    a = block.author
    n = len(a)
    demo = world.user_demo[a]
    strength = world.user_strength[a]
    member = demo >= 0
    # a non-member context demographic: one of the author's noise demographics, at random
    mask = world.noise_mask[a]
    pick = np.argmax(rng.random((n, n_demo)) * mask, axis=1)
    has_noise = mask.any(axis=1)
    kinds_idx = {k: i for i, k in enumerate(PHRASE_KINDS)}
    u = rng.random(n)
    # members: probabilities per kind (self-ID rises with strength)
    p_member = {
        "selfid": 0.015 + 0.09 * strength,
        "anti_selfid": np.full(n, 0.002),
        "selfid_quoted": np.full(n, 0.004),
        "selfid_question": np.full(n, 0.004),
        "selfid_negated": np.full(n, 0.003),
        "selfid_hypothetical": np.full(n, 0.003),
    }
    p_noise = {
        "selfid": np.full(n, 0.0),
        "anti_selfid": np.full(n, 0.03),
        "selfid_quoted": np.full(n, 0.006),
        "selfid_question": np.full(n, 0.006),
        "selfid_negated": np.full(n, 0.005),
        "selfid_hypothetical": np.full(n, 0.005),
    }
    # a member who also posts in another community's seeds speaks in that context 30% of the time
    use_noise = has_noise & (~member | (rng.random(n) < 0.3))
    context = np.where(use_noise, pick, demo)
    cum = np.zeros(n)
    chosen = np.full(n, -1, dtype=np.int64)
    for kind in PHRASE_KINDS:
        p = np.where(use_noise, p_noise[kind], np.where(member, p_member[kind], 0.0))
        hit = (chosen < 0) & (u >= cum) & (u < cum + p)
        chosen[hit] = kinds_idx[kind]
        cum = cum + p
    # the general population quotes or asks about phrases occasionally too
    plain = general & ~member & ~has_noise & (chosen < 0)
    rare = plain & (rng.random(n) < 0.004)
    chosen[rare] = kinds_idx["selfid_quoted"] + rng.integers(0, 4, int(rare.sum()))
    context[rare] = rng.integers(0, n_demo, int(rare.sum()))
    sel = general & (chosen >= 0) & (context >= 0)
    block.kind[sel] = KIND_PHRASE0 + chosen[sel]
    block.phrase_demo[sel] = context[sel]


def _conversations(block: PostBlock, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Order the block's posts into conversations per subreddit.

    Returns (order, root_position, reply_position, timestamp): ``order`` permutes the block's
    posts so that each conversation is contiguous with its root first; positions index into the
    permuted arrays (reply_position -1 for roots).
    """
    n = len(block.author)
    subs = block.subreddit
    counts = np.bincount(subs)
    n_conv = np.maximum(1, np.round(counts * SUBMISSION_SHARE)).astype(np.int64)
    conv = (rng.random(n) * n_conv[subs]).astype(np.int64)
    key = subs * (int(n_conv.max()) + 1) + conv
    ts = rng.integers(TIME_START, TIME_END, n)
    order = np.lexsort((ts, key))
    key_sorted = key[order]
    starts = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    pos = np.arange(n) - group_start
    to_root = rng.random(n) < 0.6
    target = np.where(to_root, 0, np.floor(rng.random(n) * pos).astype(np.int64))
    reply = np.where(pos == 0, -1, group_start + target)
    return order, group_start, reply, ts[order]


@dataclass
class TextBanks:
    chatter: list[str]
    titles: list[str]
    topic_sentences: list[list[str]]  # per topic
    keywords: list[tuple[str, ...]]


def make_banks(topics: list[Topic], rng, size: int = 4000) -> TextBanks:
    banned = _topic_words(topics)

    def clean(words):
        return tuple(w for w in words if w not in banned)

    bank = {
        "noun": clean(CHATTER_NOUNS),
        "adj": clean(CHATTER_ADJECTIVES),
        "verb": clean(CHATTER_VERBS),
        "adverb": clean(CHATTER_ADVERBS),
    }
    chatter = [
        _fill(CHATTER_TEMPLATES[rng.integers(len(CHATTER_TEMPLATES))], rng, bank)
        for _ in range(size)
    ]
    titles = [
        _fill(TITLE_TEMPLATES[rng.integers(len(TITLE_TEMPLATES))], rng, bank)
        for _ in range(size // 4)
    ]
    topic_sentences = []
    for t in topics:
        kws = t.keywords
        sents = []
        for _ in range(300):
            tpl = TOPIC_TEMPLATES[rng.integers(len(TOPIC_TEMPLATES))]
            pick = rng.choice(len(kws), size=min(3, len(kws)), replace=False)
            words = {f"kw{i + 1}": kws[j] for i, j in enumerate(pick)}
            for i in range(len(pick), 3):
                words[f"kw{i + 1}"] = kws[pick[0]]
            sents.append(tpl.format(**words))
        topic_sentences.append(sents)
    return TextBanks(chatter, titles, topic_sentences, tuple(t.keywords for t in topics))


def _texts(
    world: World, block: PostBlock, order: np.ndarray, banks: TextBanks, demographics, params, rng
) -> list[str]:
    n = len(order)
    kind = block.kind[order]
    author = block.author[order]
    topic = block.topic[order]
    pdemo = block.phrase_demo[order]
    n_chat = len(banks.chatter)
    r_chat = rng.integers(0, n_chat, (n, 4))
    n_sent = rng.integers(1, 4, n)
    r_u = rng.random((n, 6))
    r_int = rng.integers(0, 1 << 30, (n, 6))
    demo = world.user_demo[author]
    out = []
    chatter = banks.chatter
    for i in range(n):
        k = kind[i]
        ri = r_int[i]
        if k == KIND_GENERAL:
            out.append(" ".join(chatter[j] for j in r_chat[i, : n_sent[i]]))
        elif k == KIND_TOPIC:
            t = topic[i]
            sents = banks.topic_sentences[t]
            d = demo[i]
            if world.planted[t]:
                pool = world.markers[d, t] if d >= 0 else world.shared_markers[t]
            else:
                pool = world.markers[:, t].ravel()
            n_m = 1 + ri[3] % 3
            idx = [pool[(ri[4] + j * 7919) % len(pool)] for j in range(n_m)]
            if len(set(idx)) < n_m:
                idx = list(dict.fromkeys(idx))
            mk = [world.marker_phrases[j] for j in idx]
            choices = MARKER_TEMPLATES_BY_COUNT[len(mk)]
            msent = choices[ri[5] % len(choices)].format(
                **{f"m{j + 1}": m for j, m in enumerate(mk)}
            )
            parts = [
                chatter[r_chat[i, 0]],
                sents[ri[0] % len(sents)],
                msent,
                sents[ri[1] % len(sents)],
            ]
            if r_u[i, 0] < 0.5:
                parts.append(chatter[r_chat[i, 1]])
            out.append(" ".join(parts))
        elif k == KIND_BOT:
            tpl = BOT_TEMPLATES[ri[0] % len(BOT_TEMPLATES)]
            out.append(tpl.format(n=ri[1] % 90 + 10, m=ri[2] % 40))
        elif k == KIND_SPAM:
            tpl = SPAM_TEMPLATES[ri[0] % len(SPAM_TEMPLATES)]
            out.append(tpl.format(adj=CHATTER_ADJECTIVES[ri[1] % 5], noun=CHATTER_NOUNS[ri[2] % 5]))
        else:
            pk = PHRASE_KINDS[k - KIND_PHRASE0]
            d = demographics[pdemo[i]]
            phrases = d.anti_self_id_phrases if pk == "anti_selfid" else d.self_id_phrases
            if not phrases:
                out.append(" ".join(chatter[j] for j in r_chat[i, : n_sent[i]]))
                continue
            phrase = phrases[ri[0] % len(phrases)]
            tpls = PHRASE_TEMPLATES[pk]
            sent = tpls[ri[1] % len(tpls)].format(P=phrase, p=_inline(phrase))
            pre = chatter[r_chat[i, 0]]
            post = chatter[r_chat[i, 1]]
            out.append(f"{pre} {sent} {post}" if r_u[i, 1] < 0.5 else f"{sent} {post}")
    return out


# --------------------------------------------------------------------------- writers


def _top_level(reply: np.ndarray) -> np.ndarray:
    """Position of each comment's top-level ancestor (the comment replying to the root)."""
    n = len(reply)
    idx = np.arange(n)
    parent = np.where(reply < 0, idx, reply)
    is_root = reply < 0
    parent_is_root = is_root[parent] & ~is_root
    top = np.where(parent_is_root | is_root, idx, parent)
    for _ in range(64):
        nxt = np.where(parent_is_root[top] | is_root[top], top, parent[top])
        if np.array_equal(nxt, top):
            break
        top = nxt
    return top


class CorpusWriter:
    """Streams blocks of posts into shard directories (ConvoKit) or RS_/RC_ files (Pushshift)."""

    def __init__(
        self, out_dir: Path, params: SynthParams, subreddits: list[str], user_names: list[str]
    ):
        self.out_dir = out_dir
        self.params = params
        self.subreddits = subreddits
        self.user_names = user_names
        self.n_shards = params.shards
        self.handles: dict[str, object] = {}
        self.first_conversation = [True] * self.n_shards
        self.speakers = [set() for _ in range(self.n_shards)]
        self.counts = [[0, 0] for _ in range(self.n_shards)]  # submissions, comments
        out_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.n_shards):
            if params.format == "convokit":
                d = out_dir / f"sample-{i}"
                d.mkdir(parents=True, exist_ok=True)
                self._open(f"utt{i}", d / "utterances.jsonl")
                self._open(f"conv{i}", d / "conversations.json").write(b"{")
            else:
                suffix = ".ndjson.zst" if params.compress else ".ndjson"
                self._open(f"rs{i}", out_dir / f"RS_sample-{i}{suffix}")
                self._open(f"rc{i}", out_dir / f"RC_sample-{i}{suffix}")

    def _open(self, key: str, path: Path):
        raw = open(path, "wb")
        if path.suffix == ".zst":
            import zstandard

            fh = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=True)
        else:
            fh = raw
        self.handles[key] = fh
        return fh

    def write(self, frame: pl.DataFrame) -> None:
        """``frame``: one block's posts in conversation order with the columns built in
        ``generate`` (id, conversation_id, reply_to, top_level, timestamp, speaker, author_id,
        text, title, score, subreddit_id, is_root, num_comments)."""
        frame = frame.with_columns(shard=pl.col("subreddit_id") % self.n_shards)
        names = pl.Series("subreddit", self.subreddits)
        frame = frame.with_columns(subreddit=names.gather(frame["subreddit_id"]))
        for shard_index, part in frame.group_by("shard", maintain_order=True):
            shard = int(shard_index[0])
            self.speakers[shard].update(part["speaker"].unique().to_list())
            n_sub = int(part["is_root"].sum())
            self.counts[shard][0] += n_sub
            self.counts[shard][1] += part.height - n_sub
            if self.params.format == "convokit":
                self._write_convokit(shard, part)
            else:
                self._write_pushshift(shard, part)

    def _write_convokit(self, shard: int, part: pl.DataFrame) -> None:
        utt = part.select(
            "id",
            "conversation_id",
            "text",
            "speaker",
            pl.struct(
                "score",
                top_level_comment=pl.when(pl.col("is_root"))
                .then(None)
                .otherwise(pl.col("top_level")),
                retrieved_on=pl.col("timestamp") + 86400,
                gilded=pl.lit(0),
                subreddit=pl.col("subreddit"),
                stickied=pl.lit(False),
                permalink=pl.format("/r/{}/comments/{}/", "subreddit", "conversation_id"),
                author_flair_text=pl.lit(""),
            ).alias("meta"),
            pl.col("reply_to").alias("reply-to"),
            "timestamp",
            pl.lit([], dtype=pl.List(pl.String)).alias("vectors"),
        )
        buf = io.BytesIO()
        utt.write_ndjson(buf)
        self.handles[f"utt{shard}"].write(buf.getvalue())
        roots = part.filter(pl.col("is_root"))
        conv = self.handles[f"conv{shard}"]
        pieces = []
        for row in roots.select(
            "id", "title", "num_comments", "timestamp", "subreddit"
        ).iter_rows():
            cid, title, num_comments, ts, sub = row
            meta = {
                "title": title,
                "num_comments": num_comments,
                "domain": f"self.{sub}",
                "timestamp": ts,
                "subreddit": sub,
                "gilded": 0,
                "stickied": False,
                "author_flair_text": "",
            }
            entry = json.dumps(cid) + ": " + json.dumps({"meta": meta, "vectors": []})
            if self.first_conversation[shard]:
                self.first_conversation[shard] = False
                pieces.append(entry)
            else:
                pieces.append(", " + entry)
        conv.write("".join(pieces).encode("utf-8"))

    def _write_pushshift(self, shard: int, part: pl.DataFrame) -> None:
        subs = part.filter(pl.col("is_root")).select(
            "id",
            pl.col("speaker").alias("author"),
            "subreddit",
            pl.col("timestamp").alias("created_utc"),
            "title",
            pl.col("text").alias("selftext"),
            "score",
            "num_comments",
        )
        comments = part.filter(~pl.col("is_root")).select(
            "id",
            pl.col("speaker").alias("author"),
            "subreddit",
            pl.col("timestamp").alias("created_utc"),
            pl.col("text").alias("body"),
            "score",
            pl.when(pl.col("reply_to") == pl.col("conversation_id"))
            .then(pl.format("t3_{}", "reply_to"))
            .otherwise(pl.format("t1_{}", "reply_to"))
            .alias("parent_id"),
            pl.format("t3_{}", "conversation_id").alias("link_id"),
        )
        for key, frame in ((f"rs{shard}", subs), (f"rc{shard}", comments)):
            if frame.height:
                buf = io.BytesIO()
                frame.write_ndjson(buf)
                self.handles[key].write(buf.getvalue())

    def close(self) -> None:
        for i in range(self.n_shards):
            if self.params.format != "convokit":
                continue
            d = self.out_dir / f"sample-{i}"
            self.handles[f"conv{i}"].write(b"}")
            speakers = {name: {"meta": {}, "vectors": []} for name in sorted(self.speakers[i])}
            (d / "speakers.json").write_text(json.dumps(speakers), encoding="utf-8")
            corpus = {
                "name": f"sample-{i}",
                "num_posts": self.counts[i][0],
                "num_comments": self.counts[i][1],
            }
            (d / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
            index = {
                "utterances-index": {
                    "score": ["<class 'int'>"],
                    "top_level_comment": ["<class 'str'>"],
                    "retrieved_on": ["<class 'int'>"],
                    "gilded": ["<class 'int'>"],
                    "subreddit": ["<class 'str'>"],
                    "stickied": ["<class 'bool'>"],
                    "permalink": ["<class 'str'>"],
                    "author_flair_text": ["<class 'str'>"],
                },
                "speakers-index": {},
                "conversations-index": {
                    "title": ["<class 'str'>"],
                    "num_comments": ["<class 'int'>"],
                    "domain": ["<class 'str'>"],
                    "timestamp": ["<class 'int'>"],
                    "subreddit": ["<class 'str'>"],
                    "gilded": ["<class 'int'>"],
                    "stickied": ["<class 'bool'>"],
                    "author_flair_text": ["<class 'str'>"],
                },
                "overall-index": {
                    "name": ["<class 'str'>"],
                    "num_posts": ["<class 'int'>"],
                    "num_comments": ["<class 'int'>"],
                },
                "version": 1,
                "vectors": [],
            }
            (d / "index.json").write_text(json.dumps(index), encoding="utf-8")
        for fh in self.handles.values():
            fh.close()


# --------------------------------------------------------------------------- generation


def generate(
    params: SynthParams,
    demographics: list[Demographic],
    topics: list[Topic],
    out_dir: str | Path,
    truth_dir: str | Path,
) -> dict:
    """Write the corpus under ``out_dir`` and the truth files under ``truth_dir``; return meta."""
    out_dir, truth_dir = Path(out_dir), Path(truth_dir)
    if params.shards < 1:
        raise ConfigError("synth.shards: must be at least 1")
    if params.format not in ("convokit", "pushshift"):
        raise ConfigError(f"synth.format: unknown format {params.format!r}")
    # the corpus is written to a staging folder beside out_dir and moved into place when
    # complete: a killed run publishes no shard (its staging folder goes at the next run)
    remove_stale_temporaries(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        meta = _generate(params, demographics, topics, staging, truth_dir)
        _publish(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(truth_dir / ".post_truth_parts", ignore_errors=True)  # a failed run's parts
    return meta


def _publish(staging: Path, out_dir: Path) -> None:
    """Move every shard of the staging folder onto its name in ``out_dir`` (one rename each)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):
        target = out_dir / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)


def _generate(
    params: SynthParams,
    demographics: list[Demographic],
    topics: list[Topic],
    out_dir: Path,
    truth_dir: Path,
) -> dict:
    rng = np.random.default_rng(params.seed)
    world = build_world(params, demographics, topics, rng)
    banks = make_banks(topics, rng)
    n_demo = len(demographics)
    n_users = len(world.user_names)
    names = pl.Series("name", world.user_names)
    writer = CorpusWriter(out_dir, params, world.subreddits, world.user_names)
    parts_dir = truth_dir / ".post_truth_parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    for old in parts_dir.glob("*.parquet"):
        old.unlink()
    next_id = ID_OFFSET
    n_posts = 0
    kind_counts = np.zeros(len(KIND_NAMES), dtype=np.int64)
    dirt_counts = np.zeros(len(DIRT_NAMES), dtype=np.int64)
    topic_names = pl.Series("topic", [t.topic for t in topics])
    demo_names = pl.Series("demographic", [d.key for d in demographics])
    for block_no, start in enumerate(range(0, n_users, params.block_users)):
        users = np.arange(start, min(start + params.block_users, n_users))
        block = _block_posts(world, users, params, n_demo, rng)
        order, group_start, reply, ts = _conversations(block, rng)
        n = len(order)
        texts = _texts(world, block, order, banks, demographics, params, rng)
        ids = np.arange(next_id, next_id + n)
        next_id += n
        id_str = _base36(ids)
        id_series = pl.Series("id", id_str)
        is_root = reply < 0
        top = _top_level(reply)
        author = block.author[order]
        kind = block.kind[order]
        sub = block.subreddit[order]
        conv_sizes = np.bincount(group_start, minlength=n)
        # dirt: removed / deleted / deleted author / empty (never on bots, nor on the planted
        # noise posts in seed subreddits, which keeps the member share of U_d as planted)
        u = rng.random(n)
        exempt = (world.user_kind[author] == 1) | block.noise_seed[order]
        c1 = params.removed_rate
        c2 = c1 + params.deleted_rate
        c3 = c2 + params.deleted_author_rate
        c4 = c3 + params.empty_rate
        dirt = np.select([u < c1, u < c2, u < c3, (u < c4) & ~is_root], [1, 2, 3, 4], 0)
        dirt[exempt] = 0
        link_post = is_root & (kind == KIND_GENERAL) & (rng.random(n) < 0.1)
        titles = [banks.titles[j] for j in rng.integers(0, len(banks.titles), n).tolist()]
        topic_idx = block.topic[order]
        text_col = pl.Series("text", texts)
        scores = np.round(rng.lognormal(1.0, 1.3, n)).astype(np.int64) - rng.integers(0, 3, n)
        frame = pl.DataFrame(
            {
                "id": id_series,
                "conversation_id": id_series.gather(group_start),
                "reply_to": id_series.gather(np.where(reply < 0, 0, reply)),
                "top_level": id_series.gather(top),
                "timestamp": ts.astype(np.int64),
                "author_id": author,
                "text": text_col,
                "title": pl.Series(titles),
                "score": scores,
                "subreddit_id": sub,
                "is_root": is_root,
                "num_comments": conv_sizes[group_start] - 1,
                "dirt": dirt,
                "link_post": link_post,
            }
        ).with_columns(
            reply_to=pl.when(pl.col("is_root")).then(None).otherwise(pl.col("reply_to")),
            speaker=pl.when(pl.col("dirt").is_in([2, 3]))
            .then(pl.lit("[deleted]"))
            .otherwise(names.gather(author)),
            text=pl.when(pl.col("dirt") == 1)
            .then(pl.lit("[removed]"))
            .when(pl.col("dirt") == 2)
            .then(pl.lit("[deleted]"))
            .when((pl.col("dirt") == 4) | pl.col("link_post"))
            .then(pl.lit(""))
            .otherwise(pl.col("text")),
        )
        writer.write(frame)
        kinds_named = pl.Series(KIND_NAMES).gather(kind)
        author_demo = world.user_demo[author]
        truth = pl.DataFrame(
            {
                "post_id": id_series,
                "author": names.gather(author),
                "subreddit": pl.Series(world.subreddits).gather(sub),
                "kind_of_text": kinds_named,
                "topic": topic_names.gather(np.where(topic_idx < 0, 0, topic_idx)),
                "demographic": demo_names.gather(np.where(author_demo < 0, 0, author_demo)),
                "phrase_demographic": demo_names.gather(np.maximum(block.phrase_demo[order], 0)),
                "dirt": pl.Series(DIRT_NAMES).gather(dirt),
                "is_submission": is_root,
            }
        ).with_columns(
            topic=pl.when(pl.Series(topic_idx < 0)).then(None).otherwise(pl.col("topic")),
            demographic=pl.when(pl.Series(author_demo < 0))
            .then(None)
            .otherwise(pl.col("demographic")),
            phrase_demographic=pl.when(pl.Series(block.phrase_demo[order] < 0))
            .then(None)
            .otherwise(pl.col("phrase_demographic")),
        )
        write_parquet(truth, parts_dir / f"part-{block_no:05d}.parquet")
        n_posts += n
        kind_counts += np.bincount(kind, minlength=len(KIND_NAMES))
        dirt_counts += np.bincount(dirt, minlength=len(DIRT_NAMES))
        log.info("block %d: %d posts (total %d)", block_no, n, n_posts)
    writer.close()
    parts = sorted(parts_dir.glob("*.parquet"))
    write_parquet(pl.scan_parquet([str(p) for p in parts]), truth_dir / "post_truth.parquet")
    for p in parts:
        p.unlink()
    parts_dir.rmdir()

    # ground truth: one row per (regular or bot/spam user, demographic)
    rows_author = np.repeat(np.arange(n_users), n_demo)
    rows_demo = np.tile(np.arange(n_demo), n_users)
    member = world.user_demo[rows_author] == rows_demo
    ground = pl.DataFrame(
        {
            "author": names.gather(rows_author),
            "demographic": demo_names.gather(rows_demo),
            "is_member": member,
            "strength": np.where(member, world.user_strength[rows_author], 0.0),
            "in_seed_noise": world.noise_mask[rows_author, rows_demo],
            "account": pl.Series(["regular", "bot", "spam"]).gather(world.user_kind[rows_author]),
        }
    )
    write_parquet(ground, truth_dir / "ground_truth.parquet")
    meta = {
        "parameters": {k: getattr(params, k) for k in params.__dataclass_fields__},
        "n_posts": int(n_posts),
        "n_users": int(n_users),
        "subreddits": world.subreddits,
        "kind_counts": {k: int(c) for k, c in zip(KIND_NAMES, kind_counts, strict=True)},
        "dirt_counts": {k: int(c) for k, c in zip(DIRT_NAMES, dirt_counts, strict=True)},
        "demographics": {
            d.key: {
                "change_point": world.change_points[d.key],
                "member_share": 1 - world.change_points[d.key] / 100,
                "n_members": int((world.user_demo == di).sum()),
                "n_seed_noise_users": world.n_noise[d.key],
                "seed_subreddits": [world.subreddits[j] for j in world.seed_subreddit_ids[di]],
                "markers": {
                    t.topic: [world.marker_phrases[j] for j in world.markers[di, ti]]
                    for ti, t in enumerate(topics)
                },
            }
            for di, d in enumerate(demographics)
        },
        "shared_markers": {
            t.topic: [world.marker_phrases[j] for j in world.shared_markers[ti]]
            for ti, t in enumerate(topics)
        },
        "planted_topics": [t.topic for ti, t in enumerate(topics) if world.planted[ti]],
    }
    write_json(meta, truth_dir / "synth_meta.json")
    return meta


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    d = SynthParams()
    parser.add_argument(
        "--demographics", required=True, help="demographics file (YAML or release JSON)"
    )
    parser.add_argument("--topics", required=True, help="topic list (YAML or release JSON)")
    parser.add_argument(
        "--out", required=True, help="corpus directory (shard dirs / RS_ RC_ files)"
    )
    parser.add_argument("--truth-dir", required=True, help="where ground_truth.parquet etc. go")
    parser.add_argument(
        "--seed", type=int, default=d.seed, help="seed of every random choice of the generator"
    )
    parser.add_argument(
        "--posts",
        type=int,
        default=None,
        help="scale every size parameter for about this many posts (default: the parameters below)",
    )
    parser.add_argument(
        "--general-subreddits",
        type=int,
        default=None,
        help="general (non-demographic) subreddits (default: scaled with --posts)",
    )
    parser.add_argument(
        "--general-users",
        type=int,
        default=None,
        help="general users (default: scaled with --posts)",
    )
    parser.add_argument(
        "--members-per-demographic",
        type=int,
        default=None,
        help="members per demographic community (default: scaled with --posts)",
    )
    parser.add_argument(
        "--topic-posts-per-pair",
        type=int,
        default=None,
        help="neutral topic posts per (demographic, topic) (default: scaled with --posts)",
    )
    parser.add_argument(
        "--shards", type=int, default=d.shards, help="corpus shards written (one ingest job each)"
    )
    parser.add_argument(
        "--format",
        choices=("convokit", "pushshift"),
        default=d.format,
        help="convokit: ConvoKit corpus folders; pushshift: RS_/RC_ NDJSON files",
    )
    parser.add_argument("--compress", action="store_true", help="pushshift: write .ndjson.zst")
    parser.add_argument(
        "--plant-group-difference",
        choices=("true", "false"),
        default="true",
        help="per-(demographic, topic) marker phrases; false: one shared distribution",
    )
    parser.add_argument(
        "--planted-topic",
        action="append",
        dest="planted_topics",
        default=None,
        help="plant the group difference only on this topic (repeatable; default: every topic)",
    )
    parser.add_argument(
        "--block-users", type=int, default=d.block_users, help="users per streamed block"
    )


def params_from_args(args: argparse.Namespace) -> SynthParams:
    common = dict(
        seed=args.seed,
        shards=args.shards,
        format=args.format,
        compress=args.compress,
        plant_group_difference=args.plant_group_difference == "true",
        planted_topics=tuple(args.planted_topics) if args.planted_topics is not None else None,
        block_users=args.block_users,
    )
    params = SynthParams.scaled(args.posts, **common) if args.posts else SynthParams(**common)
    overrides = {
        "n_general_subreddits": args.general_subreddits,
        "n_general_users": args.general_users,
        "members_per_demographic": args.members_per_demographic,
        "topic_posts_per_pair": args.topic_posts_per_pair,
    }
    values = {k: getattr(params, k) for k in params.__dataclass_fields__}
    values.update({k: v for k, v in overrides.items() if v is not None})
    for key, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ConfigError(f"synth.{key}: must not be negative")
    return SynthParams(**values)


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    demographics = load_demographics(args.demographics)
    topics = load_topics(args.topics)
    meta = generate(params, demographics, topics, args.out, args.truth_dir)
    log.info("generated %d posts by %d users in %s", meta["n_posts"], meta["n_users"], args.out)
    return 0
