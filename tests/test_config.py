"""The shipped configurations validate, and config errors are one line naming the key."""

from __future__ import annotations

import pytest
import snakemake_fork
import yaml
from conftest import error_lines
from splits.config.definitions import load_group_sets, load_topics
from splits.config.schema import load_config, validate_config
from splits.errors import ConfigError
from splits.pipeline.checks import validate_probes


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_validate_and_name_registered_models(repo_root, name):
    config = load_config(repo_root / "config" / name)
    registry = config["models"]
    for experiment, spec in config["evaluation"]["experiments"].items():
        for model in [*spec["tms"], *spec["cms"]]:
            assert model in registry, f"{name}: experiment {experiment} uses unknown model {model}"


def test_paper_config_matches_the_paper(repo_root):
    config = load_config(repo_root / "config" / "paper.yaml")
    assert config["sampling"]["k"] == 42
    assert config["topics"]["top_k"] == 3000
    assert config["topics"]["drop_fraction"] == 0.25
    assert config["graph"]["top_n"] == 50000 and config["graph"]["k"] == 20
    experiments = config["evaluation"]["experiments"]
    assert experiments["tm_strength"]["rows"] == 500
    assert experiments["k_sweep"]["rows"] == 250
    assert experiments["strong_vs_weak"]["rows"] == 1000
    cm = config["models"][experiments["tm_strength"]["cms"][0]]
    assert cm["backend"] == "vllm" and cm["model"] == "meta-llama/Llama-3.1-70B-Instruct"


def test_release_topics_read_as_10_categories_and_200_topics(reference_dir):
    topics = load_topics(reference_dir / "splits-upstream" / "topics.json")
    assert len(topics) == 200
    assert len({t.category for t in topics}) == 10
    assert all(len(t.keywords) in (39, 40) for t in topics)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"graph": {"k": "x"}}, "graph.k: 'x' is not of type 'integer'"),
        ({"grpah": {}}, "grpah: unknown key"),
        ({"graph": {"topn": 3}}, "graph.topn: unknown key"),
        ({"sampling": {"k": 3}}, "sampling.k: 3 is not a multiple of 2"),
    ],
)
def test_config_errors_name_the_key(config, message):
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert str(err.value) == message


def test_snakemake_stops_with_one_line_naming_the_key(tmp_path, repo_root):
    config = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    config["graph"]["k"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake_fork.run(["-n", "--configfile", str(bad)], repo_root, timeout=120)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert lines == ["config error: graph.k: 'many' is not of type 'integer'"]


def _probes(repo_root, **probes) -> dict:
    config = validate_config({"probes": probes})
    config["probes"]["empathy"]["group_sets_file"] = str(
        repo_root / config["probes"]["empathy"]["group_sets_file"]
    )
    return config


def test_the_papers_empathy_group_sets(repo_root):
    sets = load_group_sets(repo_root / "config" / "empathy_groups.yaml")
    assert sorted(sets) == ["nationality", "race_ethnicity", "religion"]
    race = sets["race_ethnicity"]
    assert len(race) == 4 and sum(len(v) for v in race.values()) == 18
    assert [len(v) for v in race.values()] == [5, 4, 3, 6]
    assert len(sets["nationality"]) == 21 and len(sets["religion"]) == 5
    assert all(len(v) == 1 for v in sets["nationality"].values())


@pytest.mark.parametrize(
    ("probes", "message"),
    [
        (
            {"empathy": {"envent_group_sets": ["caste"]}},
            "probes.empathy.envent_group_sets: 'caste' is neither 'demographics' nor a set of",
        ),
        (
            {
                "grasp": {
                    "inputs": {
                        "d": {
                            "ratings": ["r.csv"],
                            "raters": ["a.csv"],
                            "attribute_cols": ["rater_gender"],
                        }
                    }
                }
            },  # fmt: skip
            "probes.grasp.inputs.d.raters: give rater attributes either on the rating rows",
        ),
        (
            {
                "empathy": {
                    "variants": {"v": {"system_prompt": "s", "prompt": "p", "scale": [9, 1]}}
                }
            },
            "probes.empathy.variants.v.scale: must be [low, high], low < high",
        ),
    ],
)
def test_probe_config_errors_name_the_key(repo_root, probes, message):
    config = _probes(repo_root, **probes)
    with pytest.raises(ConfigError) as err:
        validate_probes(config)
    assert str(err.value).startswith(message)


def test_group_sets_file_errors(tmp_path):
    bad = tmp_path / "sets.yaml"
    bad.write_text("faith:\n  X: [a x]\n")
    with pytest.raises(ConfigError, match="faith: needs at least two groups"):
        load_group_sets(bad)
    bad.write_text("faith:\n  X: [a x]\n  Y: [a x]\n")
    with pytest.raises(ConfigError, match="name 'a x' appears twice"):
        load_group_sets(bad)
    bad.write_text("demographics:\n  X: [a x]\n  Y: [a y]\n")
    with pytest.raises(ConfigError, match="reserved"):
        load_group_sets(bad)
    bad.write_text("my faith:\n  X: [a x]\n  Y: [a y]\n")
    with pytest.raises(ConfigError, match="only letters"):
        load_group_sets(bad)


def _topics_file(tmp_path, keywords):
    path = tmp_path / "topics.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topics": [
                    {"category": "Sports", "topic": "Soccer", "keywords": ["soccer", "goal"]},
                    {"category": "Misc", "topic": "Filler words", "keywords": keywords},
                ]
            }
        )
    )
    return path


def test_topic_of_stop_words_only_is_refused_naming_it(tmp_path):
    from splits.text import query_tokens

    keywords = ["the", "and", "of it", "--"]
    assert query_tokens(keywords) == []  # the retrieval would search for nothing
    with pytest.raises(ConfigError) as err:
        load_topics(_topics_file(tmp_path, keywords))
    assert "'Filler words'" in str(err.value) and "stop word" in str(err.value)
    assert "\n" not in str(err.value)
    # one content word is enough
    assert len(load_topics(_topics_file(tmp_path, ["the", "and", "of it", "tea"]))) == 2


def _with_template(repo_root, tmp_path, key, text):
    config = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    path = tmp_path / "template.txt"
    path.write_text(text)
    config = validate_config(config)  # defaults filled in (e.g. the empathy variant)
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = str(path)
    return validate_config(config), path


@pytest.mark.parametrize(
    ("key", "text", "slot"),
    [
        ("evaluation.tm_prompt", "{group_a} {group_b} {topic} {catgory} {posts}", "catgory"),
        (
            "evaluation.cm_prompt",
            'f"""{demo_a} {demo_b} {post_set1} {post_set2} {theories} {demo_c}"""',
            "demo_c",
        ),
        ("demographics.verifier_prompt", "{demographic} {phrase} {contxt}", "contxt"),
        ("probes.stress.prompt", "Is {group} stressed? {text} {grop}", "grop"),
        ("probes.empathy.variants.default.system_prompt", "You are {perciever}.", "perciever"),
        ("probes.personalization.judge_prompt", "{source} {target} {original} {rewrit}", "rewrit"),
        ("hypotheses.generate.prompt", "{group_a} {group_b} {topic} {postsA}", "postsA"),
    ],
)
def test_template_with_an_unknown_slot_is_refused_naming_file_and_slot(
    repo_root, tmp_path, key, text, slot
):
    from splits.pipeline.checks import check_prompt_templates

    config, path = _with_template(repo_root, tmp_path, key, text)
    with pytest.raises(ConfigError) as err:
        check_prompt_templates(config)
    message = str(err.value)
    assert message.startswith(key) and str(path) in message and "{" + slot + "}" in message
    assert "\n" not in message


def test_shipped_templates_and_json_braces_pass(repo_root, tmp_path):
    from splits.config.templates import PROMPT_SLOTS
    from splits.pipeline.checks import check_prompt_templates, configured_templates

    for name in ("config.yaml", "paper.yaml"):
        config = load_config(repo_root / "config" / name)
        check_prompt_templates(config)
        assert {key.split("[")[0].rsplit(".", 1)[0] for key, _, _ in configured_templates(config)}
    config, _ = _with_template(
        repo_root, tmp_path, "probes.stress.prompt", 'Answer as { "stressed": true } {group} {text}'
    )
    check_prompt_templates(config)
    # every prompt key of the schema is checked
    schema = yaml.safe_load((repo_root / "workflow/schemas/config.schema.yaml").read_text())

    def prompt_keys(node, prefix=""):
        for name, sub in (node.get("properties") or {}).items():
            key = f"{prefix}{name}"
            if "prompt" in name or (name == "tasks" and "probes.personalization" in key):
                yield key
            if isinstance(sub, dict):
                yield from prompt_keys(sub, key + ".")
                entry = sub.get("additionalProperties")
                if isinstance(entry, dict):  # named entries, e.g. the empathy variants
                    yield from prompt_keys(entry, key + ".*.")

    keys = set(prompt_keys(schema)) - {"evaluation.tm_raw_prompt"}
    assert keys == set(PROMPT_SLOTS)


def test_snakemake_refuses_unknown_slot_before_running(tmp_path, repo_root):
    config = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    template = tmp_path / "theory.txt"
    template.write_text(
        (repo_root / "resources/prompts/theory.txt").read_text().replace("{category}", "{catgory}")
    )
    config["evaluation"]["tm_prompt"] = str(template)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake_fork.run(["-n", "--configfile", str(bad)], repo_root, timeout=120)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith(
        f"config error: evaluation.tm_prompt: {template}: unknown slot {{catgory}}"
    )
