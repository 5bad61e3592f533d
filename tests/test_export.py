"""Dataset export: loadable with datasets, salted author hashes, card and count tables."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os

import polars as pl
import pytest
from splits import privacy
from splits.cli import main
from splits.config.settings import schema_defaults
from splits.sampling.draw import sample_quadruplets
from splits.sampling.settings import ExportSettings, SampleSettings


def export_settings(**overrides) -> list[str]:
    """``--settings`` of ``splits export``: the schema's defaults, some replaced."""
    settings = schema_defaults(ExportSettings, **overrides)
    return ["--settings", json.dumps(dataclasses.asdict(settings))]


def draw(posts: pl.DataFrame, k: int, seed: int) -> pl.DataFrame:
    return sample_quadruplets(posts, schema_defaults(SampleSettings, k=k, seed=seed))


def topic_posts() -> pl.DataFrame:
    rows = []
    for topic, category in (("Chess", "Hobbies"), ("Curling", "Sports")):
        for key in ("catholic", "jewish", "teacher"):
            for i in range(30):
                rows.append(
                    {
                        "post_id": f"{topic}-{key}-{i}",
                        "author": f"RealUser_{key}_{i % 7}",
                        "subreddit": "askreddit",
                        "text": f"{topic} post number {i} by a {key} user",
                        "demographic": key,
                        "category": category,
                        "topic": topic,
                        "score": float(30 - i),
                        "norm_score": (30 - i) / 30,
                        "rank": i + 1,
                    }
                )
    return pl.DataFrame(rows)


@pytest.fixture
def exported(tmp_path, monkeypatch):
    posts = topic_posts()
    quads = draw(posts, 4, seed=5)
    posts.write_parquet(tmp_path / "topic_posts.parquet")
    quads.write_parquet(tmp_path / "quadruplets.parquet")
    monkeypatch.setenv("TEST_SPLITS_SALT", "s3cret-salt-value")
    out = tmp_path / "export"
    argv = [
        "export",
        "--quadruplets",
        str(tmp_path / "quadruplets.parquet"),
        "--topic-posts",
        str(tmp_path / "topic_posts.parquet"),
        "--out-dir",
        str(out),
        *export_settings(k=4, salt_env="TEST_SPLITS_SALT"),
    ]
    assert main(argv) == 0
    return out, posts, quads


def test_export_loads_with_datasets_and_hides_authors(exported):
    datasets = pytest.importorskip("datasets")
    out, posts, quads = exported
    loaded = datasets.load_dataset(
        "parquet", data_files=str(out / "quadruplets.parquet"), split="train"
    )
    assert loaded.num_rows == len(quads)
    assert loaded.column_names[:7] == [
        "description",
        "demographic_A",
        "demographic_B",
        "example_posts",
        "sample_A",
        "sample_B",
        "switched",
    ]
    first = loaded[0]
    assert len(first["example_posts"]) == 4 and len(first["sample_A"]) == 3
    loaded_posts = datasets.load_dataset(
        "parquet", data_files=str(out / "topic_posts.parquet"), split="train"
    )
    assert loaded_posts.num_rows == len(posts)
    assert "author" not in loaded_posts.column_names and "author_hash" in loaded_posts.column_names
    # no raw author name anywhere in the export: any file, any cell (also inside texts)
    authors = sorted(set(posts.get_column("author").unique().to_list()))
    pattern = "|".join(authors)
    for path in out.iterdir():
        if path.suffix == ".parquet":
            frame = pl.read_parquet(path)
            for column in frame.columns:
                values = frame.get_column(column)
                if isinstance(values.dtype, pl.List):
                    values = values.explode()
                assert not values.cast(pl.String).str.contains(pattern).any(), (path.name, column)
        else:
            text = path.read_text()
            assert not any(name in text for name in authors), path.name
            assert "s3cret-salt-value" not in text
    # the check itself can fail: the input has the names
    assert posts.get_column("author").str.contains(pattern).all()


def test_author_hashes_are_salted_hmacs(exported, monkeypatch):
    out, posts, _ = exported
    hashed = pl.read_parquet(out / "topic_posts.parquet")
    assert hashed.get_column("post_id").to_list() == posts.get_column("post_id").to_list()
    expected = [
        hmac.new(b"s3cret-salt-value", a.encode(), hashlib.sha256).hexdigest()[:16]
        for a in posts.get_column("author")
    ]
    assert hashed.get_column("author_hash").to_list() == expected
    # same author -> same hash; another salt -> other hashes
    assert hashed.get_column("author_hash").n_unique() == posts.get_column("author").n_unique()
    other = privacy.hash_authors(posts, "another salt")
    assert set(other.get_column("author_hash")).isdisjoint(set(hashed.get_column("author_hash")))


def test_development_salt_warns(tmp_path, monkeypatch, caplog):
    posts = topic_posts()
    posts.write_parquet(tmp_path / "tp.parquet")
    draw(posts, 4, seed=1).write_parquet(tmp_path / "q.parquet")
    monkeypatch.delenv("UNSET_SALT_VARIABLE", raising=False)
    assert privacy.resolve_salt("UNSET_SALT_VARIABLE") == (privacy.DEVELOPMENT_SALT, True)
    with caplog.at_level("WARNING"):
        assert (
            main(
                [
                    "export",
                    "--quadruplets",
                    str(tmp_path / "q.parquet"),
                    "--topic-posts",
                    str(tmp_path / "tp.parquet"),
                    "--out-dir",
                    str(tmp_path / "out"),
                    *export_settings(salt_env="UNSET_SALT_VARIABLE"),
                ]
            )
            == 0
        )
    assert "development salt" in caplog.text
    assert "do not publish" in (tmp_path / "out" / "README.md").read_text()


def test_count_tables_and_card(exported):
    out, posts, quads = exported
    by_topic = pl.read_csv(out / "counts_by_topic.csv")
    pairs = ["catholic / jewish", "catholic / teacher", "jewish / teacher"]
    assert by_topic.columns == ["category", "topic", *pairs, "total"]
    for row in by_topic.iter_rows(named=True):
        for pair in pairs:
            a, b = pair.split(" / ")
            n = quads.filter(
                (pl.col("description") == row["topic"])
                & (pl.col("demographic_A") == a)
                & (pl.col("demographic_B") == b)
            )
            assert row[pair] == len(n) == 30 // 5
        assert row["total"] == sum(row[p] for p in pairs)
    by_category = pl.read_csv(out / "counts_by_category.csv")
    assert by_category.get_column("category").to_list() == ["Hobbies", "Sports", "all"]
    assert by_category.filter(pl.col("category") == "all")["total"].item() == len(quads)
    markdown = (out / "counts_by_topic.md").read_text().splitlines()
    assert (
        markdown[0].startswith("| category | topic | catholic / jewish")
        and len(markdown) == 2 + by_topic.height
    )
    card = (out / "README.md").read_text()
    for heading in ("## Contents", "## Method", "## Licence", "## Intended use", "## Limitations"):
        assert heading in card
    assert f"{len(quads):,} rows" in card and "k = 4" in card
    assert "| all |" in card


def test_missing_input_is_a_config_error(tmp_path):
    assert (
        main(
            [
                "export",
                "--quadruplets",
                str(tmp_path / "nope.parquet"),
                "--topic-posts",
                str(tmp_path / "x"),
                "--out-dir",
                str(tmp_path),
                *export_settings(),
            ]
        )
        == 2
    )


def _front_matter(card: str) -> dict:
    import yaml

    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_card_claims_no_licence_unless_the_config_states_one(tmp_path, monkeypatch):
    """Issue 25: the card declared cc-by-4.0 whatever the source's licence. Without
    export.license it claims none (no license field, the Licence section says so); with it, the
    stated licence and source are in the front matter and the text."""
    posts = topic_posts()
    posts.write_parquet(tmp_path / "tp.parquet")
    draw(posts, 4, seed=1).write_parquet(tmp_path / "q.parquet")
    monkeypatch.setenv("CARD_SALT", "a-salt")
    argv = ["export", "--quadruplets", str(tmp_path / "q.parquet"), "--topic-posts"]
    argv += [str(tmp_path / "tp.parquet")]
    plain = export_settings(salt_env="CARD_SALT")
    assert main([*argv, "--out-dir", str(tmp_path / "plain"), *plain]) == 0
    card = (tmp_path / "plain" / "README.md").read_text()
    assert "license" not in _front_matter(card)
    assert "cc-by" not in card.lower() and "CC BY" not in card
    assert "No licence is stated" in card and "`export.source` was not set" in card
    source = "Pushshift dumps of r/Cornell, 2011-2018: it's Reddit's terms"
    stated = export_settings(salt_env="CARD_SALT", license="cc-by-nc-4.0", source=source)
    assert main([*argv, "--out-dir", str(tmp_path / "stated"), *stated]) == 0
    card = (tmp_path / "stated" / "README.md").read_text()
    assert _front_matter(card)["license"] == "cc-by-nc-4.0"
    assert "Licence stated by the dataset's makers: cc-by-nc-4.0" in card
    assert f"## Source\n\n{source}." in card
    # a licence that is a sentence stays one YAML scalar
    odd = export_settings(
        salt_env="CARD_SALT", license="see LICENSE: research only, no redistribution"
    )
    assert main([*argv, "--out-dir", str(tmp_path / "odd"), *odd]) == 0
    card = (tmp_path / "odd" / "README.md").read_text()
    assert _front_matter(card)["license"] == "see LICENSE: research only, no redistribution"


def test_the_salt_fingerprint_writes_no_environment_variable(monkeypatch):
    """Issue 29: library code wrote ``os.environ`` (the config salt copied into $salt_env while
    the workflow's lookups were computed); only an entry point may write the environment."""
    monkeypatch.delenv("SPLITS_TEST_UNSET_SALT", raising=False)
    fingerprint = privacy.salt_fingerprint_for_jobs("SPLITS_TEST_UNSET_SALT", "config-salt")
    assert "SPLITS_TEST_UNSET_SALT" not in os.environ
    # the fingerprint is that of the salt the job will see (the config's, through the variable)
    expected = hashlib.sha256(b"splits-export-salt:config-salt").hexdigest()[:12]
    assert fingerprint == expected


def test_config_salt_reaches_the_jobs_only_where_the_variable_is_unset():
    export = {"salt_env": "SALT_VAR", "salt": "from-config"}
    assert privacy.config_salt_environment(export, {}) == {"SALT_VAR": "from-config"}
    assert privacy.config_salt_environment(export, {"SALT_VAR": "from-env"}) == {}
    assert privacy.config_salt_environment({"salt_env": "SALT_VAR", "salt": None}, {}) == {}
    # the variable wins in the fingerprint too
    env_fp = privacy.salt_fingerprint_for_jobs("SALT_VAR", "from-config", {"SALT_VAR": "from-env"})
    assert env_fp == hashlib.sha256(b"splits-export-salt:from-env").hexdigest()[:12]
    assert privacy.salt_fingerprint_for_jobs("SALT_VAR", None, {}) == "development-salt"


def test_export_by_hand_with_a_config_file_equals_the_rule_settings(tmp_path, monkeypatch):
    """``splits export --config FILE`` reads the same settings as the rule's ``--settings``."""
    posts = topic_posts()
    posts.write_parquet(tmp_path / "tp.parquet")
    draw(posts, 4, seed=1).write_parquet(tmp_path / "q.parquet")
    monkeypatch.setenv("HAND_SALT", "hand-salt")
    config = tmp_path / "config.yaml"
    config.write_text(
        "sampling:\n  k: 4\n"
        "export:\n  salt_env: HAND_SALT\n  post_ids: hash\n  license: cc-by-4.0\n"
        "  source: a test corpus\n"
    )
    argv = ["export", "--quadruplets", str(tmp_path / "q.parquet")]
    argv += ["--topic-posts", str(tmp_path / "tp.parquet")]
    by_hand = [*argv, "--out-dir", str(tmp_path / "hand"), "--config", str(config)]
    assert main(by_hand) == 0
    rule = export_settings(
        k=4, salt_env="HAND_SALT", post_ids="hash", license="cc-by-4.0", source="a test corpus"
    )
    assert main([*argv, "--out-dir", str(tmp_path / "rule"), *rule]) == 0
    names = sorted(p.name for p in (tmp_path / "rule").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "hand").iterdir())
    for name in names:
        assert (tmp_path / "hand" / name).read_bytes() == (tmp_path / "rule" / name).read_bytes()
    card = (tmp_path / "hand" / "README.md").read_text()
    # the config's values, not the schema's defaults, reached the card and the post ids
    assert "k = 4" in card and "cc-by-4.0" in card and "a test corpus" in card
    hashed = pl.read_parquet(tmp_path / "hand" / "topic_posts.parquet")["post_id"]
    assert not set(hashed) & set(posts["post_id"])
