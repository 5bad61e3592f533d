"""Topic lists: the release's topics.json, our YAML, malformed files, and LLM generation."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml
from splits.config.definitions import load_topics
from splits.config.schema import validate_config
from splits.config.settings import schema_defaults, settings_json
from splits.errors import ConfigError
from splits.llm import Backend, Completion, load_model, register_builtin
from splits.topics import generate as topics_stage
from splits.topics.settings import GenerateTopicsSettings

PAPER_CATEGORIES = {
    "Sports & Fitness",
    "Entertainment & Media",
    "Technology & Gaming",
    "Professional & Career-oriented Spaces",
    "Hobbies & Special Interests",
    "Finance & Investing",
    "Education & Academia",
    "News & Current Events",
    "Travel & Geography",
    "Humor & Memes",
}


def test_release_topics_json_reads_10_categories_200_topics(reference_dir):
    path = reference_dir / "splits-upstream" / "topics.json"
    topics = load_topics(path)
    assert len(topics) == 200
    assert {t.category for t in topics} == PAPER_CATEGORIES
    per_category = pl.Series([t.category for t in topics]).value_counts()
    assert set(per_category["count"].to_list()) == {20}
    sizes = sorted(len(t.keywords) for t in topics)
    assert sizes[:2] == [39, 39] and set(sizes[2:]) == {40}  # as the reference README says
    raw = json.loads(path.read_text())
    assert [t.keywords for t in topics if t.topic == "Basketball"][0] == tuple(
        raw["Sports & Fitness"]["Basketball"]
    )


def test_default_yaml_topics_match_release_keywords(reference_dir):
    release = {t.topic: t for t in load_topics(reference_dir / "splits-upstream" / "topics.json")}
    ours = load_topics("config/topics.yaml")
    assert len(ours) == 10
    for topic in ours:
        assert topic.category == release[topic.topic].category
        assert topic.keywords == release[topic.topic].keywords[: len(topic.keywords)]


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ({"topics": [{"category": "C", "topic": "Chess", "keywords": []}]}, ".yaml", "'Chess'"),
        (
            {"topics": [{"category": "C", "topic": "Chess"}]},
            ".yaml",
            "'Chess' is missing 'keywords'",
        ),
        (
            {"topics": [{"category": "C", "topic": "Chess", "keywords": "chess"}]},
            ".yaml",
            "'Chess'",
        ),
        ({"topics": [{"category": "C", "topic": "Go", "keywords": ["go", " "]}]}, ".yaml", "'Go'"),
        (
            {
                "topics": [
                    {"category": "C", "topic": "Go", "keywords": ["go"]},
                    {"category": "D", "topic": "go", "keywords": ["baduk"]},
                ]
            },
            ".yaml",
            "'go' appears twice",
        ),
        ({"Sports": {"Curling": "stones"}}, ".json", "'Curling'"),
        ({"Sports": {"Curling": []}}, ".json", "'Curling'"),
        ({"Sports": ["Curling"]}, ".json", "'Sports'"),
    ],
)
def test_malformed_topic_files_name_the_topic(tmp_path, content, suffix, message):
    path = tmp_path / f"topics{suffix}"
    path.write_text(json.dumps(content) if suffix == ".json" else yaml.safe_dump(content))
    with pytest.raises(ConfigError, match=message) as err:
        load_topics(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_unparsable_and_missing_topic_files(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_topics(path)
    with pytest.raises(ConfigError, match="topics.file"):
        load_topics(tmp_path / "absent.yaml")


# --------------------------------------------------------------------------- generation

ANSWERS = {
    "categories": "Here are the categories:\n1. Sports & Fitness\n2. Finance & Investing\n3. sports & fitness\n",
    "topics": {
        "Sports & Fitness": "- Curling\n- Chess\n- Curling\n",
        "Finance & Investing": "* Budgeting\n* Chess\n",  # Chess again: dropped here
    },
    "keywords": {
        "Curling": '1) curling stone\n2) sweeping\n3. "broom",\n',
        "Chess": "checkmate\nopening\nCheckmate\n\n",
        "Budgeting": "budget\nsavings goal\n",
    },
}
CALLS: list[dict] = []


@register_builtin("test-topic-writer")
def topic_writer(name, spec):
    class TopicWriter(Backend):
        def identity(self):
            return {"kind": "test-topic-writer", "empty_for": spec.get("kind")}

        def generate(self, requests):
            out = []
            for request in requests:
                payload = dict(request.payload)
                CALLS.append(payload)
                assert request.messages[0]["content"].strip()
                if "topic" in payload:
                    text = ANSWERS["keywords"].get(payload["topic"], "")
                elif "category" in payload:
                    text = ANSWERS["topics"][payload["category"]]
                else:
                    text = ANSWERS["categories"]
                out.append(Completion(text, "stop", 1, 1, 0.0))
            return out

    backend = TopicWriter()
    backend.name = name
    return backend


def writer():
    return load_model(
        "writer", {"writer": {"backend": "builtin", "kind": "test-topic-writer"}}, cache_path=None
    )


def test_generate_topics_three_stages_validated():
    CALLS.clear()
    settings = schema_defaults(GenerateTopicsSettings, n_categories=10, n_topics=20, n_keywords=40)
    generated = topics_stage.generate_topics(writer(), topics_stage.load_prompts(), settings)
    assert [(t.category, t.topic, t.keywords) for t in generated] == [
        ("Sports & Fitness", "Curling", ("curling stone", "sweeping", "broom")),
        ("Sports & Fitness", "Chess", ("checkmate", "opening")),
        ("Finance & Investing", "Budgeting", ("budget", "savings goal")),
    ]
    stages = [("topic" in c) * 2 + ("category" in c) for c in CALLS]
    assert stages == [0, 1, 1, 3, 3, 3]  # categories, then topics per category, then keywords
    assert CALLS[0]["n_categories"] == 10 and CALLS[-1]["n_keywords"] == 40


def test_generate_topics_errors_name_the_item():
    ANSWERS["keywords"]["Chess"], saved = "   \n", ANSWERS["keywords"]["Chess"]
    try:
        with pytest.raises(topics_stage.TopicGenerationError, match="topic 'Chess'"):
            topics_stage.generate_topics(
                writer(), topics_stage.load_prompts(), schema_defaults(GenerateTopicsSettings)
            )
    finally:
        ANSWERS["keywords"]["Chess"] = saved


def test_parse_items_strips_list_markup():
    text = 'Sure! Topics:\n1. Running\n2) Hiking,\n- "Yoga"\n* `Pilates`;\n\n  b) Rowing.\n'
    assert topics_stage.parse_items(text) == ["Running", "Hiking", "Yoga", "Pilates", "Rowing"]
    assert topics_stage.dedupe(["A", "a", "B", "b", "C"], limit=2) == ["A", "B"]


def test_cli_writes_yaml_that_loads_back(tmp_path):
    from splits.cli import main

    out = tmp_path / "generated.yaml"
    spec = json.dumps({"writer": {"backend": "builtin", "kind": "test-topic-writer"}})
    config = {"topics": {"generate": {"model": "writer", "categories": ["Sports & Fitness"]}}}
    config["topics"]["generate"]["n_topics"] = 1
    settings = settings_json(validate_config(config), GenerateTopicsSettings)
    argv = ["generate-topics", "--model-spec", spec, "--settings", settings, "--out", str(out)]
    assert main(argv) == 0
    loaded = load_topics(out)
    assert [(t.category, t.topic, t.keywords) for t in loaded] == [
        ("Sports & Fitness", "Curling", ("curling stone", "sweeping", "broom"))
    ]
    assert out.read_text().startswith("# Generated by `splits generate-topics`")
    # by hand: the same settings and the model's registry entry from a config file
    config["models"] = {"writer": {"backend": "builtin", "kind": "test-topic-writer"}}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    by_hand = tmp_path / "by_hand.yaml"
    assert main(["generate-topics", "--config", str(config_file), "--out", str(by_hand)]) == 0
    assert by_hand.read_text() == out.read_text()
    # an unknown model is a config error naming it; so is none, and --settings without a spec
    unknown = settings.replace('"model":"writer"', '"model":"nope"')
    argv = ["generate-topics", "--model-spec", spec, "--settings", unknown, "--out", str(out)]
    assert main(argv) == 2
    unset = settings_json(validate_config({}), GenerateTopicsSettings)
    argv = ["generate-topics", "--model-spec", spec, "--settings", unset, "--out", str(out)]
    assert main(argv) == 2
    assert main(["generate-topics", "--settings", settings, "--out", str(out)]) == 2
