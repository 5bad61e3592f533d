"""Config checks of the hypotheses section: the shipped configs pass, mistakes are one line
naming the key, and the literature lexicons fit the release's topics and demographics."""

from __future__ import annotations

import copy

import pytest
from splits.config.definitions import load_demographics, load_topics
from splits.config.schema import load_config
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.hypotheses.lexicon import Cleaner, read_records
from splits.hypotheses.settings import FileSettings
from splits.pipeline.checks import check_hypotheses


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_pass(repo_root, name):
    check_hypotheses(load_config(repo_root / "config" / name))


@pytest.fixture
def config(repo_root):
    return load_config(repo_root / "config" / "config.yaml")


@pytest.mark.parametrize(
    "change,key",
    [
        (
            lambda c: c["hypotheses"]["theories"].append({"experiment": "nope", "tm": "x", "k": 1}),
            r"hypotheses.theories\[1\].experiment",
        ),
        (
            lambda c: c["hypotheses"]["theories"].append(
                {"experiment": "sample", "tm": "lexical", "k": 4}
            ),
            r"hypotheses.theories\[1\].tm",
        ),
        (
            lambda c: c["hypotheses"]["theories"].append(
                {"experiment": "sample", "tm": "oracle-lexical", "k": 5}
            ),
            r"hypotheses.theories\[1\].k",
        ),
        (
            lambda c: c["hypotheses"]["theories"].append(
                {"experiment": "sample", "tm": "no-theory", "k": 4}
            ),
            r"hypotheses.theories\[1\].tm: builtin 'no-theory'",
        ),
        (
            lambda c: c["hypotheses"]["generate"]["models"].append("missing"),
            "hypotheses.generate.models: 'missing' is not a model",
        ),
        (
            lambda c: c["hypotheses"]["generate"]["models"].append("lexical"),
            "hypotheses.generate.models: 'lexical' is a builtin",
        ),
        (lambda c: c["hypotheses"].update(report_k=0.3), "hypotheses.report_k"),
        (
            lambda c: c["hypotheses"]["retrieval"].update(mode="release", method="atire"),
            "hypotheses.retrieval.method: release mode",
        ),
        (
            lambda c: c["hypotheses"]["retrieval"].update(analyzer="wordpiece", method="lucene"),
            "hypotheses.retrieval.vocab",
        ),
        (lambda c: c["hypotheses"].update(encoder="lexical"), "hypotheses.encoder"),
        (
            lambda c: c["hypotheses"]["files"].update(mine="no/such/file.yaml"),
            "hypotheses.files.mine",
        ),
    ],
)
def test_mistakes_name_the_key(config, change, key):
    broken = copy.deepcopy(config)
    change(broken)
    with pytest.raises(ConfigError, match=key):
        check_hypotheses(broken)


def test_an_llm_tm_needs_the_theory_model(config):
    broken = copy.deepcopy(config)
    broken["models"]["api"] = {
        "backend": "openai",
        "base_url": "http://localhost:1/v1",
        "model": "m",
    }
    broken["evaluation"]["experiments"]["sample"]["tms"].append("api")
    broken["hypotheses"]["theories"].append({"experiment": "sample", "tm": "api", "k": 4})
    with pytest.raises(ConfigError, match="hypotheses.theory_model: needed"):
        check_hypotheses(broken)
    broken["hypotheses"]["theory_model"] = "api"
    check_hypotheses(broken)


def test_schema_rejects_bad_values(repo_root):
    from splits.config.schema import validate_config

    for section, message in (
        ({"k_fractions": [0]}, "hypotheses.k_fractions.0"),
        ({"list_size": 0}, "hypotheses.list_size"),
        ({"max_phrase_tokens": 40}, "hypotheses.max_phrase_tokens"),
        ({"files": {"bad name": "x.yaml"}}, "hypotheses.files"),
        ({"unknown": 1}, "hypotheses.unknown: unknown key"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate_config({"hypotheses": section})


def test_known_lexicons_fit_the_release(repo_root, reference_dir):
    topics = [t.topic for t in load_topics(reference_dir / "splits-upstream" / "topics.json")]
    demographics = [d.key for d in load_demographics(repo_root / "config" / "demographics.yaml")]
    records, unreadable = read_records(repo_root / "config" / "hypotheses" / "known.yaml")
    limits = schema_defaults(FileSettings).limits
    result = Cleaner(topics, demographics, limits).add_all(records, "file/known:")
    assert not unreadable and not result.skipped and not result.entries_dropped
    assert len(result.hypotheses) == 5 * len(records)  # every record against the five others
    assert all(h.source == "known" and "(" in h.note for h in result.hypotheses)
