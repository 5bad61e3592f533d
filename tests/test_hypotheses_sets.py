"""Hypothesis sets: reading user files, cleaning (every record kept or counted), LLM answers,
theories, and the LLM generator through a real OpenAI-compatible HTTP exchange (the scripted
local server) with the response cache."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
import yaml
from splits.cli import main
from splits.config.schema import load_config
from splits.config.settings import schema_defaults, settings_json
from splits.errors import ConfigError
from splits.hypotheses.lexicon import (
    Cleaner,
    Limits,
    frame_hypotheses,
    hypotheses_frame,
    read_records,
)
from splits.hypotheses.settings import FileSettings, GenerateSettings, TheoriesSettings
from splits.hypotheses.sources import oracle_records, parse_lexicon_reply
from splits.testing.fake_openai_server import FakeOpenAIServer

TOPICS = ["Basketball", "Soccer"]
GROUPS = ["black", "catholic", "construction", "hindu_jain_sikh", "jewish", "teacher"]
CONTEXT = [
    "--topics-file",
    "config/topics.yaml",
    "--demographics",
    "config/demographics.sample.yaml",
]


#: the schema's lexicon bounds (hypotheses.max_entries, max_phrase_tokens)
LIMITS = schema_defaults(FileSettings).limits


def settings(cls, **changes) -> list[str]:
    """``--settings`` with the schema's defaults of ``cls``, some fields changed."""
    return ["--settings", json.dumps(dataclasses.asdict(schema_defaults(cls, **changes)))]


def cleaner(limits: Limits = LIMITS, **kwargs) -> Cleaner:
    return Cleaner(TOPICS, GROUPS, limits, **kwargs)


def test_cleaning_counts_every_reason():
    records = [
        {
            "topic": "Basketball",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "jewish",
            "lexicon": ["nosh", "Schlep", "oy vey"],
        },
        {
            "topic": "Basketball",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "A",
            "lexicon": "schlep; nosh; OY VEY",
        },  # same claim
        {
            "topic": "Chess",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "jewish",
            "lexicon": ["x"],
        },
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "martian",
            "target": "jewish",
            "lexicon": ["x"],
        },
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "jewish",
            "target": "jewish",
            "lexicon": ["x"],
        },
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "teacher",
            "lexicon": ["x"],
        },
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "B",
            "lexicon": ["!!!", "?"],
        },
        {"topic": "Soccer", "demographic_A": "jewish", "demographic_B": "black", "lexicon": ["x"]},
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "B",
            "lexicon": ["a b c d e f g", "finna", "FINNA", "#"],
        },
        {
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "B",
            "lexicon": [f"w{i}" for i in range(9)],
        },
        "not a mapping",
    ]
    result = cleaner(limits=Limits(max_entries=8, max_phrase_tokens=6)).add_all(records, "f:")
    assert [h.lexicon for h in result.hypotheses] == [("nosh", "Schlep", "oy vey"), ("finna",)]
    first, second = result.hypotheses
    # pairs are stored alphabetically; target "B" of (jewish, black) is black
    assert (first.demographic_a, first.demographic_b, first.target) == ("black", "jewish", "jewish")
    assert (second.target, second.source) == ("black", "user")
    assert first.hypothesis_id.startswith("f:") and len(first.hypothesis_id) == 14
    assert result.skipped == {
        "duplicate": 1,
        "unknown_topic": 1,
        "unknown_demographic": 1,
        "same_group": 1,
        "target_not_in_pair": 1,
        "empty_lexicon": 1,
        "missing_target": 1,
        "too_many_entries": 1,
        "not_a_mapping": 1,
    }
    assert result.entries_dropped == {"no_letters": 3, "phrase_too_long": 1, "repeated": 1}
    kept = len(result.hypotheses) + sum(result.skipped.values())
    assert kept == len(records)  # every record kept or counted


def test_star_expands_to_every_other_group():
    record = {
        "id": "aave",
        "topic": "Soccer",
        "demographic_A": "black",
        "demographic_B": "*",
        "target": "black",
        "lexicon": ["finna"],
        "source": "known",
        "citation": "Green (2002)",
    }
    result = cleaner().add_all([record])
    assert len(result.hypotheses) == 5
    assert {h.hypothesis_id for h in result.hypotheses} == {
        f"aave-{g}" for g in GROUPS if g != "black"
    }
    assert all(
        h.target == "black" and h.source == "known" and h.note == "Green (2002)"
        for h in result.hypotheses
    )


def test_file_formats_read_the_same(tmp_path):
    rows = [
        {
            "id": "h1",
            "topic": "Soccer",
            "demographic_A": "jewish",
            "demographic_B": "black",
            "target": "jewish",
            "lexicon": ["nosh", "oy vey"],
        },
        {
            "id": "h2",
            "topic": "Basketball",
            "demographic_A": "teacher",
            "demographic_B": "black",
            "target": "B",
            "lexicon": ["finna"],
        },
    ]
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({"hypotheses": rows}))
    (tmp_path / "h.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    csv_rows = [
        {**r, "lexicon": json.dumps(r["lexicon"]) if i == 0 else ";".join(r["lexicon"])}
        for i, r in enumerate(rows)
    ]
    pl.DataFrame(csv_rows).write_csv(tmp_path / "h.csv")
    results = {}
    for suffix in ("yaml", "jsonl", "csv"):
        records, unreadable = read_records(tmp_path / f"h.{suffix}")
        results[suffix] = [
            (h.hypothesis_id, h.lexicon, h.target) for h in cleaner().add_all(records).hypotheses
        ]
        assert unreadable == ({"not_json": 1} if suffix == "jsonl" else {})
    assert results["yaml"] == results["jsonl"] == results["csv"]
    assert results["yaml"][1] == ("h2", ("finna",), "black")  # B as the record names it
    (tmp_path / "h.txt").write_text("x")
    with pytest.raises(ConfigError, match="unknown hypothesis file type"):
        read_records(tmp_path / "h.txt")
    (tmp_path / "bad.csv").write_text("topic,lexicon\nSoccer,x\n")
    with pytest.raises(ConfigError, match="missing CSV column"):
        read_records(tmp_path / "bad.csv")


def test_file_with_no_valid_hypothesis_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "h.yaml"
    path.write_text(
        yaml.safe_dump(
            [
                {
                    "topic": "Chess",
                    "demographic_A": "a",
                    "demographic_B": "b",
                    "target": "a",
                    "lexicon": ["x"],
                }
            ]
        )
    )
    code = main(
        [
            "hypotheses",
            "file",
            "--input",
            str(path),
            "--name",
            "mine",
            *CONTEXT,
            *settings(FileSettings),
            "--out",
            str(tmp_path / "o.parquet"),
            "--report",
            str(tmp_path / "o.json"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "hypotheses.files.mine" in err and "unknown_topic" in err
    assert not (tmp_path / "o.parquet").exists()


def test_parse_lexicon_reply():
    fenced = 'Sure!\n```json\n[{"target": "A", "lexicon": ["nosh", "oy vey"], "rationale": "Yiddish"},\n {"target": "Group B", "lexicon": ["finna"]}]\n```'
    items, problems = parse_lexicon_reply(fenced)
    assert items == [
        {"target": "A", "lexicon": ["nosh", "oy vey"], "note": "Yiddish"},
        {"target": "B", "lexicon": ["finna"], "note": ""},
    ]
    assert not problems
    items, problems = parse_lexicon_reply(
        '[{"target": "C", "lexicon": ["x"]}, 3, {"target": "A", "lexicon": "x"}]'
    )
    assert items == [] and problems == {
        "item_target_not_a_or_b": 1,
        "item_not_an_object": 1,
        "item_lexicon_not_a_list_of_strings": 1,
    }
    assert parse_lexicon_reply("no list here")[1] == {"reply_without_json_list": 1}
    assert parse_lexicon_reply("[not json]")[1] == {"reply_not_json": 1}


def test_oracle_theories_become_lexicons():
    theories = pl.DataFrame(
        {
            "quadruplet_id": ["q1", "q2"],
            "eval_row": [0, 1],
            "tm": ["oracle-lexical"] * 2,
            "k": [16, 16],
            "theory": [
                "Group A (Black (African American)) posts use words like: finna, lowkey\nGroup B (Jewish) posts use words like: nosh",
                "",
            ],
        }
    )
    rows = pl.DataFrame(
        {
            "eval_row": [0, 1],
            "description": ["Soccer", "Basketball"],
            "demographic_A": ["black", "black"],
            "demographic_B": ["jewish", "jewish"],
        }
    )
    records, problems = oracle_records(theories, rows)
    assert [(r["target"], r["lexicon"]) for r in records] == [
        ("A", ["finna", "lowkey"]),
        ("B", ["nosh"]),
    ]
    assert problems == {"empty_theory": 1}
    result = cleaner().add_all(records)
    assert [h.target for h in result.hypotheses] == ["black", "jewish"]
    assert all(h.seen == () for h in result.hypotheses)  # rows without calibration post ids


def test_theory_lexicons_remember_the_calibration_posts_their_tm_saw():
    theories = pl.DataFrame(
        {
            "eval_row": [0],
            "tm": ["oracle-lexical"],
            "k": [2],
            "theory": ["Group A (Black) posts use words like: finna"],
        }
    )
    rows = pl.DataFrame(
        {
            "eval_row": [0],
            "description": ["Soccer"],
            "demographic_A": ["black"],
            "demographic_B": ["jewish"],
            "example_post_ids": [["p1", "p2", "p3", "p4"]],
        }
    )
    records, _ = oracle_records(theories, rows)
    result = cleaner().add_all(records)
    assert result.hypotheses[0].seen == ("p1", "p2")  # the first k of the calibration set
    frame = hypotheses_frame(result.hypotheses)
    assert frame["seen_post_ids"].to_list() == [["p1", "p2"]]
    assert frame_hypotheses(frame)[0].seen == ("p1", "p2")
    # a set written before the column existed reads as having seen nothing
    assert frame_hypotheses(frame.drop("seen_post_ids"))[0].seen == ()


# --------------------------------------------------------------------------- LLM through HTTP


@pytest.fixture
def topic_posts(tmp_path):
    rows = []
    for topic in TOPICS:
        for group in GROUPS:
            for i in range(4):
                rows.append(
                    {
                        "post_id": f"{topic[:3]}-{group}-{i}",
                        "text": f"{group} post {i} about {topic.lower()} with word{group}{i}",
                        "demographic": group,
                        "topic": topic,
                    }
                )
    path = tmp_path / "topic_posts.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


def scripted_reply(body):
    """A deterministic 'model': proposes the first word that only group A's posts use."""
    prompt = body["messages"][-1]["content"]
    if "Theory:" in prompt:
        return '[{"target": "B", "lexicon": ["nosh", "schlep"], "rationale": "from the theory"}]'
    a_section = prompt.split("(group A):")[1].split("(group B):")[0]
    word = next(w for w in a_section.split() if w.startswith("word"))
    return json.dumps(
        [
            {"target": "A", "lexicon": [word, "post 0"], "rationale": "seen in A"},
            {"target": "Q", "lexicon": ["x"]},
        ]
    )


def registry(server) -> str:
    return json.dumps(
        {"backend": "openai", "base_url": server.base_url, "model": "scripted", "max_retries": 0}
    )


def test_generator_through_an_openai_server_and_its_cache(tmp_path, topic_posts):
    out = tmp_path / "llm.parquet"
    args = [
        "hypotheses",
        "generate",
        "--topic-posts",
        str(topic_posts),
        "--model",
        "api",
        "--prompt",
        "resources/prompts/hypotheses_generate.txt",
        "--cache",
        str(tmp_path / "cache.sqlite"),
        *CONTEXT,
        *settings(
            GenerateSettings,
            seed=7,
            generate=dataclasses.replace(
                schema_defaults(GenerateSettings).generate,
                topics=["Soccer"],
                posts_per_group=2,
                per_pool=3,
            ),
        ),
        "--out",
        str(out),
        "--report",
        str(tmp_path / "llm.json"),
    ]
    with FakeOpenAIServer(reply=scripted_reply) as server:
        assert main([*args, "--model-spec", registry(server)]) == 0
        first_requests = len(server.records)
        prompts = [r["body"]["messages"][-1]["content"] for r in server.records]
        frame = pl.read_parquet(out)
        # a second run (e.g. after a kill) answers from the cache: no request reaches the server
        assert main([*args, "--model-spec", registry(server)]) == 0
        assert len(server.records) == first_requests
        assert pl.read_parquet(out).equals(frame)
    report = json.loads((tmp_path / "llm.json").read_text())
    assert first_requests == 15  # one per pair of the 6 groups on the one topic
    assert frame.height == 15 and set(frame["source"]) == {"llm"}
    assert report["skipped"] == {"item_target_not_a_or_b": 15}
    row = frame.row(0, named=True)
    assert row["target"] == row["demographic_A"] and row["lexicon"][0].startswith(
        "word" + row["target"]
    )
    assert row["note"] == "seen in A"
    # the posts the model read (held out of its held-out lift): 2 of each group, shown in the
    # pair's prompt
    posts = pl.read_parquet(topic_posts)
    texts = dict(zip(posts["post_id"], posts["text"], strict=True))
    for row in frame.iter_rows(named=True):
        seen = row["seen_post_ids"]
        groups = [p.split("-")[1] for p in seen]
        assert sorted(groups) == sorted([row["demographic_A"]] * 2 + [row["demographic_B"]] * 2)
        assert all(p.startswith("Soc-") for p in seen)
        assert any(all(texts[p] in prompt for p in seen) for prompt in prompts)


def test_llm_theories_through_a_prompt(tmp_path):
    theories = pl.DataFrame(
        {
            "quadruplet_id": ["q1"],
            "eval_row": [0],
            "tm": ["llm-tm"],
            "k": [4],
            "theory": ["Group B: uses Yiddish food words."],
        }
    )
    rows = pl.DataFrame(
        {
            "quadruplet_id": ["q1"],
            "eval_row": [0],
            "description": ["Soccer"],
            "demographic_A": ["black"],
            "demographic_B": ["jewish"],
            "example_posts": [["x"]],
            "sample_A": [["a"]],
            "sample_B": [["b"]],
            "switched": [False],
        }
    )
    theories.write_parquet(tmp_path / "t.parquet")
    rows.write_parquet(tmp_path / "r.parquet")
    with FakeOpenAIServer(reply=scripted_reply) as server:
        code = main(
            [
                "hypotheses",
                "theories",
                "--theories",
                str(tmp_path / "t.parquet"),
                "--rows",
                str(tmp_path / "r.parquet"),
                "--experiment",
                "e",
                "--tm",
                "llm-tm",
                "--k",
                "4",
                "--tm-kind",
                "llm",
                "--model",
                "api",
                "--model-spec",
                registry(server),
                "--prompt",
                "resources/prompts/hypotheses_from_theory.txt",
                *CONTEXT,
                *settings(TheoriesSettings),
                "--out",
                str(tmp_path / "s.parquet"),
                "--report",
                str(tmp_path / "s.json"),
            ]
        )
        prompt = server.records[0]["body"]["messages"][-1]["content"]
    assert code == 0
    assert "Group B: uses Yiddish food words." in prompt and "Jewish" in prompt
    frame = pl.read_parquet(tmp_path / "s.parquet")
    assert frame.select("target", "lexicon", "source").to_dicts() == [
        {"target": "jewish", "lexicon": ["nosh", "schlep"], "source": "theory"}
    ]
    assert frame["hypothesis_id"][0].startswith("theory/e/llm-tm/k-4:")


def test_file_by_hand_with_a_config_file(tmp_path):
    """`splits hypotheses file --config FILE` reads the settings the rule passes as --settings
    (the file's keys, the schema's defaults for the rest): the same set, byte for byte."""
    path = tmp_path / "h.yaml"
    path.write_text(
        yaml.safe_dump(
            [
                {
                    "topic": "Soccer",
                    "demographic_A": "black",
                    "demographic_B": "jewish",
                    "target": "A",
                    "lexicon": ["finna", "lowkey", "on god"],
                },
                {
                    "topic": "Soccer",
                    "demographic_A": "black",
                    "demographic_B": "jewish",
                    "target": "B",
                    "lexicon": ["nosh"],
                },
            ]
        )
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hypotheses": {"max_entries": 2}}))
    common = ["hypotheses", "file", "--input", str(path), "--name", "mine", *CONTEXT]

    def run(name, *source):
        out = tmp_path / f"{name}.parquet"
        args = [*common, *source, "--out", str(out), "--report", str(tmp_path / f"{name}.json")]
        assert main(args) == 0
        return out.read_bytes(), json.loads((tmp_path / f"{name}.json").read_text())

    rule = settings_json(load_config(config), FileSettings)
    assert json.loads(rule) == {"max_entries": 2, "max_phrase_tokens": 6}
    by_hand = run("by_hand", "--config", str(config))
    assert by_hand == run("rule", "--settings", rule)
    assert by_hand[1]["skipped"] == {"too_many_entries": 1}  # the file's max_entries applied
    assert by_hand != run("defaults", *settings(FileSettings))
