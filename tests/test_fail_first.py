"""Fail first, never last: what the run will load and every name that becomes a path are
checked when the Snakefile starts, and a bad one stops the run in its first seconds with one line
naming the value and the fix (models the hub would have to send to a machine without network,
braces and path characters in names and keys, YAML alias bombs, weak salts, unreadable inputs).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
import snakemake_fork
import yaml
from conftest import copy_repo, error_lines
from splits.config.definitions import load_demographics, load_group_sets, load_topics
from splits.config.schema import read_config_file, validate_config
from splits.config.yamlfile import MAX_DEPTH, MAX_FILE_BYTES, expanded_size, parse_yaml, read_yaml
from splits.errors import ConfigError
from splits.hypotheses.lexicon import read_records
from splits.pipeline.model_files import (
    check_model_files,
    hub_environment_for_jobs,
    hub_unreachable_reason,
)
from splits.pipeline.names import check_names
from splits.pipeline.start import _used_models, unreadable_input
from splits.privacy import MIN_SALT_CHARACTERS, require_salt_for_real_data

STRONG_SALT = "a-test-salt-of-32-characters-xyz"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("fail_first") / "repo")


def _default_config(repo: Path) -> dict:
    return yaml.safe_load((repo / "config" / "config.yaml").read_text())


def _snakemake(work: Path, *args: str, env: dict | None = None, limit_bytes: int | None = None):
    """Snakemake in ``work`` (``limit_bytes``: its address space capped, as a user's ulimit)."""

    # the hub's variables only as the test gives them: an earlier test in the same session may
    # have set HF_HUB_OFFLINE in this process (loading a local copy of the release data does)
    hub = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_HOME")
    inherited = {name: value for name, value in os.environ.items() if name not in hub}
    started = time.perf_counter()
    proc = snakemake_fork.run(
        ["--cores", "2", *args],
        work,
        env={**inherited, "PYTHONHASHSEED": "0", **(env or {})},
        timeout=300,
        limit_bytes=limit_bytes,
    )
    return proc, time.perf_counter() - started


def _one_config_line(proc) -> str:
    assert proc.returncode != 0, proc.stdout[-2000:]
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "Exception" not in text, text[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("config error: "), text[-3000:]
    return lines[0]


def _configfile(tmp_path: Path, name: str, config: dict) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return str(path)


# --------------------------------------------------------------------------- models


def _hub_cache(home: Path, repo_id: str) -> None:
    """A Hugging Face cache under HF_HOME holding ``repo_id``'s config.json at main (the
    layout huggingface_hub writes: refs/main names the snapshot)."""
    repo = home / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "bert"}')


def test_a_hub_model_offline_stops_the_run_before_its_first_job(work, tmp_path):
    """A config that does not mention hypotheses still runs the counting baseline, whose
    triviality loads the schema's default encoder bert-base-uncased: with HF_HUB_OFFLINE and an
    empty cache the run stops at the start (before: every earlier stage ran, then the
    triviality jobs retried the hub and failed), and the same config with the model in the
    cache gets past the start."""
    config = _default_config(work)
    del config["hypotheses"]
    config["outdir"] = "results/nohyp"
    path = _configfile(tmp_path, "nohyp", config)
    home = tmp_path / "hf-empty"
    home.mkdir()
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(home)}
    proc, seconds = _snakemake(work, "--configfile", path, env=offline)
    line = _one_config_line(proc)
    assert line.startswith("config error: hypotheses.encoder: model 'bert-base-uncased'")
    for fix in (
        "HF_HUB_OFFLINE is set",
        "huggingface-cli download",
        "local folder",
        "ngram-encoder",
    ):
        assert fix in line, line
    assert seconds < 60
    assert not (work / "results" / "nohyp").exists() and not (work / "logs").exists()
    # the same, the hub unreachable (nothing listens on the port) instead of forbidden
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(home)}
    proc, _ = _snakemake(work, "-n", "--configfile", path, env=unreachable)
    assert f"127.0.0.1:{port} does not answer" in _one_config_line(proc)
    # with the model in the cache the offline run gets past the start
    cached = tmp_path / "hf-cached"
    _hub_cache(cached, "bert-base-uncased")
    proc, _ = _snakemake(work, "-n", "--configfile", path, env={**offline, "HF_HOME": str(cached)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results/nohyp/hypotheses/triviality/fighting-words.parquet" in proc.stdout


def test_the_default_config_needs_no_network(work, tmp_path):
    home = tmp_path / "hf-empty"
    home.mkdir()
    proc, _ = _snakemake(work, "-n", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-2000:]


def _checked_models(repo_root: Path, edit) -> None:
    config = validate_config(_default_config(repo_root))
    edit(config)
    check_model_files(_used_models(config), config)


def test_models_tokenizers_and_vocabularies_are_found_or_named(repo_root, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(repo_root)

    def llm_tm(model: str, **extra):
        def edit(c):
            c["models"]["local"] = {"backend": "transformers", "model": model, **extra}
            c["evaluation"]["experiments"]["sample"]["tms"].append("local")

        return edit

    # a registry LLM: the line names where it is used and the key to point at a folder
    with pytest.raises(ConfigError) as err:
        _checked_models(repo_root, llm_tm("splits-test/absent-model"))
    line = str(err.value)
    assert line.startswith("evaluation.experiments (local): model 'splits-test/absent-model'")
    assert "point models.local.model at a local folder" in line and "builtin model" in line
    # a local folder is loaded from there; its tokenizer too must be found
    _checked_models(repo_root, llm_tm(str(tmp_path)))
    with pytest.raises(
        ConfigError, match=r"splits-test/absent-tokenizer.*models\.local\.tokenizer"
    ):
        _checked_models(repo_root, llm_tm(str(tmp_path), tokenizer="splits-test/absent-tokenizer"))
    # a path that is not there is named as such, whatever the network
    with pytest.raises(ConfigError, match=r"^models\.local\.model: '/no/such/model' is neither"):
        _checked_models(repo_root, llm_tm("/no/such/model"))
    # an openai model's local tokenizer (prompt lengths) is checked; its model is the server's
    with pytest.raises(ConfigError, match="splits-test/absent-tokenizer"):

        def served(c):
            c["models"]["served"] = {
                "backend": "openai",
                "base_url": "http://localhost:1/v1",
                "model": "m",
                "tokenizer": "splits-test/absent-tokenizer",
            }
            c["evaluation"]["experiments"]["sample"]["cms"].append("served")

        _checked_models(repo_root, served)
    # the release mode's WordPiece vocabulary is a file (nothing is downloaded)
    with pytest.raises(ConfigError, match=r"^hypotheses\.retrieval\.vocab: no/vocab\.txt does not"):
        _checked_models(
            repo_root,
            lambda c: c["hypotheses"]["retrieval"].update(
                {"analyzer": "wordpiece", "vocab": "no/vocab.txt"}
            ),
        )
    # the default config's models are builtin
    _checked_models(repo_root, lambda c: None)


def test_hub_reachability_is_one_connection_with_a_deadline(monkeypatch):
    """An answering host is reachable; a refused port is not, and costs well under the
    deadline; a host whose name does not resolve is not either (no retries)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_unreachable_reason() is None
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.perf_counter()
    reason = hub_unreachable_reason(timeout=3.0)
    assert reason is not None and f"127.0.0.1:{port}" in reason
    assert time.perf_counter() - started < 3.5
    monkeypatch.setenv("HF_ENDPOINT", "https://no-such-host.invalid")
    started = time.perf_counter()
    assert "no-such-host.invalid:443" in (hub_unreachable_reason(timeout=2.0) or "")
    assert time.perf_counter() - started < 2.5


def test_jobs_read_the_cache_without_the_hub_when_it_cannot_be_reached(
    repo_root, monkeypatch, tmp_path
):
    """Hub models (in the cache: the start check passed) and a hub that does not answer: the
    Snakefile gives the jobs HF_HUB_OFFLINE, so that no job waits on connection timeouts."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    config = validate_config(_default_config(repo_root))
    config["hypotheses"]["encoder"] = "org/encoder"  # a hub id
    used = _used_models(config)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_environment_for_jobs(used, config) == {}  # the hub answers
    assert hub_environment_for_jobs(used, config) == {"HF_HUB_OFFLINE": "1"}
    config["hypotheses"]["encoder"] = str(tmp_path)  # a local folder: nothing from the hub
    assert hub_environment_for_jobs(_used_models(config), config) == {}


# --------------------------------------------------------------------------- names and keys


def _demographics_with_key(repo: Path, tmp_path: Path, key: str) -> str:
    data = yaml.safe_load((repo / "config" / "demographics.sample.yaml").read_text())
    data["demographics"][0]["key"] = key
    path = tmp_path / f"demographics-{abs(hash(key))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("key", ["../../escaped", "a;$( )", "x{y}", ".hidden", "-rf"])
def test_demographic_keys_that_are_not_names_stop_the_run(work, tmp_path, key):
    """Before: ``../../escaped`` made jobs write outside the outdir and logs/, ``;$( )`` ended in
    a multi-line MissingInputException. Now: one line naming the key and the characters."""
    config = _default_config(work)
    config["demographics"]["file"] = _demographics_with_key(work, tmp_path, key)
    config["outdir"] = "results/keys"
    proc, _ = _snakemake(work, "--configfile", _configfile(tmp_path, "keys", config))
    line = _one_config_line(proc)
    assert f"demographic key {key!r}" in line and "letters, digits, _ . and -" in line
    assert not (work / "results" / "keys").exists() and not (work / "logs").exists()
    assert not (work.parent / "escaped").exists() and not (work.parent.parent / "escaped").exists()


def test_braces_in_an_input_or_the_outdir_stop_the_run_naming_them(work, tmp_path):
    """Before: Snakemake's WildcardError / RuleException with no line naming the file."""
    dump = tmp_path / "RC_{2019}.ndjson"
    dump.write_text('{"id": "a1", "author": "u", "subreddit": "s", "body": "hi"}\n')
    config = _default_config(work)
    config["synth"]["enabled"] = False
    config["ingest"]["inputs"] = [str(dump)]
    path = _configfile(tmp_path, "brace-input", config)
    proc, _ = _snakemake(work, "-n", "--configfile", path, env={"SPLITS_SALT": STRONG_SALT})
    line = _one_config_line(proc)
    assert line.startswith(f"config error: ingest.inputs[0]: '{dump}': Snakemake reads braces")
    assert "rename" in line
    config = _default_config(work)
    config["outdir"] = "results_{x}"
    proc, _ = _snakemake(work, "-n", "--configfile", _configfile(tmp_path, "brace-out", config))
    assert _one_config_line(proc) == (
        "config error: outdir: 'results_{x}' may hold any printable character but { }"
    )


def test_names_that_become_paths_are_checked(repo_root, monkeypatch):
    """The neighbours: every config name that goes into a path, and every file the config
    names, refused in one line naming the key and the value."""
    monkeypatch.chdir(repo_root)
    config = validate_config(_default_config(repo_root))
    check_names(config)  # the shipped config passes
    sample = config["evaluation"]["experiments"]["sample"]
    cases = [
        (("evaluation", "experiments"), {"..": sample}, "evaluation.experiments..."),
        (("hypotheses", "files"), {".hidden": "x.yaml"}, "hypotheses.files..hidden"),
        (("probes", "grasp", "inputs"), {"a/b": {"ratings": ["r.csv"]}}, "probes.grasp.inputs.a/b"),
        (("topics",), {"file": "config/{x}.yaml"}, "topics.file: 'config/{x}.yaml'"),
        (("evaluation",), {"tm_prompt": "p{k}.txt"}, "evaluation.tm_prompt: 'p{k}.txt'"),
    ]
    for where, update, message in cases:
        edited = validate_config(_default_config(repo_root))
        target = edited
        for part in where:
            target = target[part]
        target.update(update)
        with pytest.raises(ConfigError) as err:
            check_names(edited)
        assert str(err.value).startswith(message) and "\n" not in str(err.value), err.value
    bad_model = validate_config(_default_config(repo_root))
    bad_model["evaluation"]["experiments"]["sample"]["tms"].append("../m")
    with pytest.raises(ConfigError, match=r"^evaluation\.experiments\.sample\.tms: name '\.\./m'"):
        check_names(bad_model)


# --------------------------------------------------------------------------- YAML bombs

LEVELS = "abcdefghi"
BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [
        f"{name}: &{name} [{', '.join(['*' + below] * 9)}]"
        for below, name in zip(LEVELS, LEVELS[1:], strict=False)
    ]
)  # 9^9 = 387,420,489 strings once expanded, in nine lines


def test_alias_bomb_in_a_config_file_is_one_line_in_seconds(work, tmp_path):
    """Before: a bomb under a builtin model's free-form key ran `snakemake -n` for 48-95 s, grew
    to GBs and ended in a MemoryError traceback from json.dumps of the config. Now the run
    stops at the start, its memory capped at 2 GiB as a user's ulimit would."""
    base = (work / "config" / "config.yaml").read_text()
    entry = "  ngram-encoder: {backend: builtin, kind: hashed-ngrams}"
    assert entry in base
    nested = "\n".join("      " + line for line in BOMB.splitlines())
    bomb = base.replace(
        entry,
        "  ngram-encoder:\n    backend: builtin\n    kind: hashed-ngrams\n    note:\n" + nested,
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb.replace("outdir: results", "outdir: results/bomb"))
    proc, seconds = _snakemake(work, "-n", "--configfile", str(path), limit_bytes=2 * 2**30)
    line = _one_config_line(proc)
    assert line.startswith("config error: models.ngram-encoder: expands to more than"), line
    assert seconds < 30
    # the default config file itself is read with the same bounds
    default = tmp_path / "default-bomb.yaml"
    default.write_text(BOMB)
    with pytest.raises(ConfigError, match="expands to more than"):
        read_config_file(default)


def test_bombs_in_every_definitions_file_are_refused_fast_with_little_memory(tmp_path):
    demographics = tmp_path / "demographics.yaml"
    demographics.write_text(BOMB + "\ndemographics: [{key: x, seed_subreddits: *i}]\n")
    topics = tmp_path / "topics.yaml"
    topics.write_text(BOMB + "\ntopics: [{category: c, topic: t, keywords: *i}]\n")
    groups = tmp_path / "groups.yaml"
    groups.write_text(BOMB + "\n")
    hypotheses = tmp_path / "hypotheses.yaml"
    hypotheses.write_text("hypotheses:\n" + "\n".join("  " + ln for ln in BOMB.splitlines()))
    readers = [
        (load_demographics, demographics),
        (load_topics, topics),
        (load_group_sets, groups),
        (read_records, hypotheses),
    ]
    for reader, path in readers:
        tracemalloc.start()
        started = time.perf_counter()
        with pytest.raises(ConfigError) as err:
            reader(path)
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert str(path) in str(err.value) and "expands to more than" in str(err.value)
        assert "\n" not in str(err.value)
        assert seconds < 1.0 and peak < 50 * 2**20, (reader.__name__, seconds, peak)


def test_expanded_size_counts_shared_values_at_each_place():
    """The measure is what json.dumps would write: counted by brute force on small cases."""
    shared = ["x", "y"]
    data = {"a": shared, "b": [shared, shared]}
    # brute force: the top mapping, its 2 keys, a's list + 2, b's list + 2 lists of 1 + 2
    assert expanded_size(data, "t") == 1 + 2 + 3 + 1 + 2 * 3
    assert expanded_size(data, "t") == expanded_size(yaml.safe_load(yaml.safe_dump(data)), "t")
    with pytest.raises(ConfigError, match="holds itself"):
        parse_yaml("a: &a [1, *a]", "loop.yaml")
    with pytest.raises(ConfigError, match=f"deeper than {MAX_DEPTH}"):
        parse_yaml("[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), "deep.yaml")
    with pytest.raises(ConfigError, match=r"^deeper\.yaml: values nested deeper"):
        parse_yaml("[" * 5000 + "]" * 5000, "deeper.yaml")  # the parser's own recursion
    with pytest.raises(ConfigError, match=r"^bad\.yaml: not valid YAML"):
        parse_yaml("a: [", "bad.yaml")


def test_a_file_over_the_size_bound_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk used, nothing to parse
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"big\.yaml: larger than 64 MiB"):
        read_yaml(big, "demographics.file")
    assert time.perf_counter() - started < 0.5


# --------------------------------------------------------------------------- salts, inputs


def test_real_data_salts_have_a_minimum_strength(monkeypatch):
    config = {"synth": {"enabled": False}, "export": {"salt_env": "SPLITS_SALT", "salt": None}}
    for weak, what in [("Q", "1 characters"), (" " * 20, "only whitespace"), ("Zq7" * 5, "15 ch")]:
        monkeypatch.setenv("SPLITS_SALT", weak)
        with pytest.raises(ConfigError) as err:
            require_salt_for_real_data(config)
        line = str(err.value)
        assert line.startswith("export.salt_env: $SPLITS_SALT: the salt is too weak"), line
        assert what in line and f"at least {MIN_SALT_CHARACTERS} characters" in line
        assert not weak.strip() or weak not in line  # the salt is never echoed
    monkeypatch.setenv("SPLITS_SALT", "a" * MIN_SALT_CHARACTERS)
    require_salt_for_real_data(config)
    # the config's salt when the variable is unset, named by its key
    monkeypatch.delenv("SPLITS_SALT")
    with pytest.raises(ConfigError, match=r"^export\.salt: the salt is too weak"):
        require_salt_for_real_data({**config, "export": {"salt_env": "SPLITS_SALT", "salt": "s"}})
    # the generated sample corpus needs none
    require_salt_for_real_data({**config, "synth": {"enabled": True}})


def test_a_weak_salt_stops_a_real_data_run(work, tmp_path):
    dump = tmp_path / "RC_2019-01.ndjson"
    dump.write_text('{"id": "a1", "author": "u", "subreddit": "s", "body": "hi"}\n')
    config = _default_config(work)
    config["synth"]["enabled"] = False
    config["ingest"]["inputs"] = [str(dump)]
    path = _configfile(tmp_path, "weak-salt", config)
    proc, _ = _snakemake(work, "-n", "--configfile", path, env={"SPLITS_SALT": "   "})
    assert "$SPLITS_SALT: the salt is too weak" in _one_config_line(proc)
    proc, _ = _snakemake(work, "-n", "--configfile", path, env={"SPLITS_SALT": STRONG_SALT})
    assert proc.returncode == 0, proc.stderr[-2000:]


def _unreadable_as_nobody(paths: list[str], queue) -> None:
    os.setgid(65534)
    os.setuid(65534)  # root reads every file: the check is tried as an ordinary user
    queue.put([unreadable_input(Path(p)) for p in paths])


@pytest.mark.skipif(not hasattr(os, "setuid"), reason="needs POSIX users")
def test_unreadable_inputs_are_named_by_the_start_check():
    """Before: an unreadable input ended in Snakemake's misleading "ensure write permissions
    for .snakemake" line. The start check opens every input (a ConvoKit folder's files too)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # a folder any user can enter
        Path(folder).chmod(0o755)
        _check_unreadable(Path(folder))


def _check_unreadable(tmp_path: Path) -> None:
    readable = tmp_path / "RC_ok.ndjson"
    readable.write_text("{}\n")
    readable.chmod(0o644)
    locked = tmp_path / "RC_locked.ndjson"
    locked.write_text("{}\n")
    locked.chmod(0o000)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "utterances.jsonl").write_text("{}\n")
    (corpus / "utterances.jsonl").chmod(0o600)
    corpus.chmod(0o755)
    paths = [str(readable), str(locked), str(corpus)]
    if os.geteuid() != 0:
        found = [unreadable_input(Path(p)) for p in paths]
    else:
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_unreadable_as_nobody, args=(paths, queue))
        child.start()
        found = queue.get(timeout=60)
        child.join()
    assert found[0] is None
    assert found[1] == f"{locked} (Permission denied)"
    assert found[2] == f"{corpus / 'utterances.jsonl'} (Permission denied)"


def test_a_full_disk_under_the_llm_cache_names_the_cache(tmp_path):
    """SQLite's SQLITE_FULL ("database or disk is full"), made by capping the database's pages
    as a full disk would, is one line naming the cache file."""
    from splits.llm.base import Completion, LLMError
    from splits.llm.cache import ResponseCache

    path = tmp_path / "results" / "llm_cache.sqlite"
    cache = ResponseCache(path)
    cache._conn.execute("PRAGMA max_page_count=8")
    with pytest.raises(LLMError) as err:
        for i in range(50):
            cache.put(f"k{i}", Completion("x" * 5000, "stop", 1, 1, 0.1))
    assert str(err.value) == f"response cache {path}: database or disk is full"
    cache.close()
