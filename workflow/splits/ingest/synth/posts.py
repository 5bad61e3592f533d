"""The posts of one block of users: how many of each kind, where, in which conversations, and
their texts (chatter, topic posts with their planted marker phrases, self-ID phrases and the
phrase occurrences that are not self-identifications, bots and spam)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from splits.config.definitions import Topic
from splits.ingest.synth.vocab import (
    BOT_TEMPLATES,
    CHATTER_ADJECTIVES,
    CHATTER_ADVERBS,
    CHATTER_NOUNS,
    CHATTER_TEMPLATES,
    CHATTER_VERBS,
    KIND_BOT,
    KIND_GENERAL,
    KIND_PHRASE0,
    KIND_SPAM,
    KIND_TOPIC,
    MARKER_TEMPLATES_BY_COUNT,
    PHRASE_KINDS,
    PHRASE_TEMPLATES,
    SPAM_TEMPLATES,
    SUBMISSION_SHARE,
    TIME_END,
    TIME_START,
    TITLE_TEMPLATES,
    TOPIC_TEMPLATES,
)
from splits.ingest.synth.world import (
    SynthParams,
    World,
    _fill,
    _inline,
    _topic_words,
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
