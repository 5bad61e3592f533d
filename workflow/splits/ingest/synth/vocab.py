"""The sample corpus's vocabulary and planted constants: change points, time span, word banks,
templates of chatter, titles, topic posts, marker and self-ID phrases, bots and spam."""

from __future__ import annotations

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
