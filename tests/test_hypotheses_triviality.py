"""Triviality: SubspaceBERTScore recall against independent implementations, and the encoder path
on a tiny random-weight BERT built here (nothing downloaded).

Oracles: a numpy least-squares projection (no QR) for the score; the release's own formula
written here in torch (QR of the lexicon's vectors, singular values of the projection) on the
encoder's hidden states; plain Hugging Face calls one text at a time for the batched encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.hypotheses.settings import TrivialitySettings
from splits.hypotheses.triviality import (
    HashedNgramEncoder,
    covered_identity_words,
    joined,
    load_encoder,
    load_identity_words,
    require_identity_words,
    subspace_recall,
    triviality_scores,
)

IDENTITY = ["Jewish", "Jews", "Judaism", "synagogue", "rabbi", "Torah", "Shabbat", "kosher"]
STOP = ["the", "of", "and", "to", "in", "is", "it", "that", "for", "on"]


def projection_recall(identity: np.ndarray, lexicon: np.ndarray) -> float:
    """Independent oracle: each identity vector's projection onto the row space of ``lexicon``
    by least squares, membership = |projection| / |a|, weighted by |a|."""
    weights, memberships = [], []
    for a in identity:
        coef, *_ = np.linalg.lstsq(lexicon.T, a, rcond=None)
        projection = lexicon.T @ coef
        weights.append(np.linalg.norm(a))
        memberships.append(np.linalg.norm(projection) / np.linalg.norm(a))
    weights, memberships = np.array(weights), np.array(memberships)
    return float((weights * memberships).sum() / weights.sum())


@pytest.mark.parametrize(
    "dims,n_identity,n_lexicon", [(50, 6, 8), (768, 12, 20), (16, 5, 30), (40, 1, 1)]
)
def test_subspace_recall_matches_projection_oracle(dims, n_identity, n_lexicon):
    rng = np.random.default_rng(dims + n_identity + n_lexicon)
    identity = rng.normal(size=(n_identity, dims)) * rng.uniform(0.5, 3, size=(n_identity, 1))
    lexicon = rng.normal(size=(n_lexicon, dims))
    # the score is rounded to 9 decimals (subspace_recall's docstring): at most 5e-10 off
    assert subspace_recall(identity, lexicon) == pytest.approx(
        projection_recall(identity, lexicon), abs=5e-10 + 1e-12
    )


def test_subspace_recall_bounds():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 30))
    assert subspace_recall(a, a) == pytest.approx(1.0)  # a set spans itself
    assert subspace_recall(a, np.vstack([a, rng.normal(size=(3, 30))])) == pytest.approx(1.0)
    # orthogonal spans: recall 0
    basis = np.linalg.qr(rng.normal(size=(30, 10)))[0].T
    assert subspace_recall(basis[:4], basis[4:]) == pytest.approx(0.0, abs=1e-12)


def test_covered_identity_words():
    words = ["Black", "Black people", "African American", "Black history"]
    lexicon = ["black history month", "finna", "african-american"]
    assert covered_identity_words(words, lexicon) == ["Black", "African American", "Black history"]
    assert covered_identity_words(words, ["blackness"]) == []


def test_hashed_encoder_identity_scores_one_and_is_deterministic():
    encoder = HashedNgramEncoder("h", dims=512)
    other = HashedNgramEncoder("h", dims=512)
    ident, stop, same = encoder.encode([joined(IDENTITY), joined(STOP), joined(IDENTITY)])
    assert np.array_equal(ident, other.encode([joined(IDENTITY)])[0])
    assert np.array_equal(ident, same)
    assert subspace_recall(ident, ident) == pytest.approx(1.0)
    assert subspace_recall(ident, stop) < 0.5
    # spelling overlap counts: "Jewishness" shares most 3-grams with "Jewish"
    partial = encoder.encode(["Jewishness, Judaic"])[0]
    assert subspace_recall(ident, partial) > subspace_recall(ident, stop)


def test_identity_words_from_the_release_file(reference_dir, tmp_path):
    path = reference_dir / "splits-upstream" / "demo_seed_words.json"
    words = load_identity_words(path, "config/demographics.sample.yaml")
    assert set(words) == {
        "black",
        "catholic",
        "construction",
        "hindu_jain_sikh",
        "jewish",
        "teacher",
    }
    assert all(6 <= len(v) <= 12 for v in words.values())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"jewish": "Jewish"}))
    with pytest.raises(ConfigError, match="hypotheses.identity_words"):
        load_identity_words(bad, "config/demographics.sample.yaml")


def test_identity_words_from_the_demographics_file():
    words = load_identity_words(None, "config/demographics.sample.yaml")
    assert "synagogue" in words["jewish"] and len(words) == 6
    require_identity_words(words, ["jewish", "black"])
    with pytest.raises(ConfigError, match="no identity words for martian"):
        require_identity_words(words, ["martian"])


# --------------------------------------------------------------------------- tiny BERT

torch = pytest.importorskip("torch", reason="the transformers encoder needs torch")
transformers = pytest.importorskip("transformers", reason="the encoder needs transformers")


def build_tiny_bert(path, hidden: int = 64) -> str:
    """A 2-layer random-weight BERT with a word-level WordPiece vocabulary, saved to ``path``."""
    words = sorted({w.lower() for w in " ".join(IDENTITY + STOP).split()})
    words += ["finna", "lowkey", "nosh", "schlep", "kvetch", "black", "history", ","]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast(str(path / "vocab.txt"), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    spec = {"backend": "transformers", "model": tiny_bert, "device": "cpu", "batch_size": 3}
    return load_encoder("tiny-bert", {"tiny-bert": spec})


def release_recall(identity_text: str, lexicon_text: str, path: str) -> float:
    """The release's computation, written from its formula: one text per forward pass, last
    hidden states, QR of the lexicon's token vectors, per identity token the singular value of
    the basis times its unit vector, weighted by the token vector's norm."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        a = model(**tok([identity_text], return_tensors="pt", truncation=True, max_length=128))
        b = model(**tok([lexicon_text], return_tensors="pt", truncation=True, max_length=128))
    a, b = a.last_hidden_state[0].double(), b.last_hidden_state[0].double()
    basis = torch.linalg.qr(b.T)[0].T  # rows: orthonormal basis of the lexicon's span
    weights = torch.linalg.norm(a, dim=1)
    memberships = torch.stack(
        [torch.linalg.svdvals(basis @ (v / v.norm()).unsqueeze(1)).mean() for v in a]
    )
    return float((memberships * weights).sum() / weights.sum())


def test_encoder_identity_vs_itself_and_stop_words(encoder, tiny_bert):
    ident = joined(IDENTITY)
    batch = schema_defaults(TrivialitySettings).encoder_batch
    scores = triviality_scores(
        encoder,
        [(ident, ident), (ident, joined(STOP)), (ident, joined(["finna", "lowkey"]))],
        batch,
    )
    assert scores[0] == pytest.approx(1.0, abs=1e-6)
    assert scores[1] < scores[0] - 0.05
    assert scores[2] < scores[0] - 0.05
    for (i, lex), score in zip(
        [(ident, joined(STOP)), (ident, joined(["finna", "lowkey"]))], scores[1:], strict=True
    ):
        assert score == pytest.approx(release_recall(i, lex, tiny_bert), abs=1e-5)


def test_a_cuda_device_without_a_gpu_is_a_one_line_error(tiny_bert):
    """The encoder's device comes from the one picker (splits.llm.devices), its error names
    the registry key."""
    from splits.llm.devices import pick_device

    if torch.cuda.is_available():
        assert pick_device(None) == "cuda" and pick_device("cuda:0") == "cuda:0"
        return
    assert pick_device(None) == pick_device("auto") == "cpu" and pick_device("cpu") == "cpu"
    spec = {"backend": "transformers", "model": tiny_bert, "device": "cuda:1"}
    with pytest.raises(ConfigError) as err:
        load_encoder("enc", {"enc": spec})
    assert str(err.value) == "models.enc.device: cuda:1 requested but no CUDA GPU is visible"


def test_batched_encoding_equals_one_text_at_a_time(encoder, tiny_bert):
    texts = [joined(IDENTITY), "finna", joined(STOP), "nosh, schlep", joined(IDENTITY[:3])]
    batched = encoder.encode(texts)  # batch_size 3: padded batches, sorted by length
    tok = transformers.AutoTokenizer.from_pretrained(tiny_bert)
    model = transformers.AutoModel.from_pretrained(tiny_bert).eval()
    for text, vectors in zip(texts, batched, strict=True):
        with torch.no_grad():
            alone = model(**tok([text], return_tensors="pt")).last_hidden_state[0].numpy()
        assert vectors.shape == alone.shape  # special tokens kept, padding removed
        assert vectors == pytest.approx(alone, abs=1e-5)


def test_encoder_by_path_and_bad_registry_entries(tiny_bert):
    by_path = load_encoder(tiny_bert, {})
    assert by_path.encode(["finna"])[0].shape == (3, 64)  # [CLS] finna [SEP]
    with pytest.raises(ConfigError, match="hypotheses.encoder"):
        load_encoder("cm", {"cm": {"backend": "builtin", "kind": "lexical"}})
    with pytest.raises(ConfigError, match="hypotheses.encoder: cannot load"):
        load_encoder(str(tiny_bert) + "-missing", {})


def test_triviality_job_with_a_registry_transformers_encoder(tiny_bert, tmp_path, capsys):
    import polars as pl
    from splits.cli import main
    from splits.hypotheses.lexicon import Hypothesis, hypotheses_frame

    hypotheses = [
        Hypothesis("h1", "Soccer", "black", "jewish", "jewish", tuple(IDENTITY), "trivial"),
        Hypothesis("h2", "Soccer", "black", "jewish", "jewish", ("finna", "lowkey"), "user"),
        Hypothesis("h3", "Soccer", "black", "jewish", "black", ("nosh",), "user"),
    ]
    hypotheses_frame(hypotheses).write_parquet(tmp_path / "set.parquet")
    words = tmp_path / "words.json"
    words.write_text(json.dumps({"jewish": IDENTITY, "black": ["black", "black history"]}))
    registry = json.dumps({"enc": {"backend": "transformers", "model": tiny_bert, "device": "cpu"}})
    args = [
        "hypotheses",
        "triviality",
        "--set",
        str(tmp_path / "set.parquet"),
        "--demographics",
        "config/demographics.sample.yaml",
        "--identity-words",
        str(words),
        "--settings",
        json.dumps({"encoder": "enc", "encoder_batch": 2}),
        "--models-json",
        registry,
        "--out",
        str(tmp_path / "t.parquet"),
    ]
    assert main(args) == 0
    frame = pl.read_parquet(tmp_path / "t.parquet")
    assert frame["triviality"][0] == pytest.approx(1.0, abs=1e-6)
    assert frame["triviality"][1] < 0.95
    assert frame["identity_words_covered"].to_list() == [IDENTITY, [], []]
    # a group without identity words is a one-line error
    capsys.readouterr()
    words.write_text(json.dumps({"jewish": IDENTITY}))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no identity words for black" in err[0]


def test_subspace_recall_is_bitwise_stable_under_equivalent_float_paths():
    """The score is a published output checked byte for byte (tests/test_default_outputs.py), but
    the QR under it runs in the machine's BLAS, whose kernels (chosen per CPU) round in their own
    order: the same lexicon on another CPU differed in the last bits of 9 triviality outputs. The
    same span reached by another rounding path (the lexicon's vectors in reverse order, or
    rescaled) must give the same float, not one a few ulps away."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        identity = rng.integers(-2, 3, size=(6, 256)).astype(float)
        lexicon = rng.integers(-2, 3, size=(9, 256)).astype(float)
        score = subspace_recall(identity, lexicon)
        assert subspace_recall(identity, lexicon[::-1]) == score
        assert subspace_recall(identity, 3.0 * lexicon) == score


def test_repeated_token_vectors_span_only_themselves():
    """A lexicon whose token vectors repeat (every ", " separator's vector is the same under the
    hashed encoder) spans only its distinct vectors: a QR kept a column per token, and the
    repeats' columns were rounding noise that counted as span (an orthogonal identity vector
    scored 1 against three copies of one vector; the default run's scores moved by up to 0.03
    between two BLAS kernels)."""
    unit = np.eye(5)
    assert subspace_recall(unit[[1]], unit[[0, 0, 0]]) == 0.0
    assert subspace_recall(unit[[0, 1]], unit[[0, 0, 2]]) == pytest.approx(0.5)
    encoder = HashedNgramEncoder("h", dims=512)
    lexicon = ["finna", "lowkey", "nosh", "schlep", "kvetch", "shul", "bagel", "oy", "mensch"]
    ident, lex = encoder.encode([joined(IDENTITY), joined(lexicon * 3)])
    assert np.linalg.matrix_rank(lex) < len(lex)  # repeated tokens: dependent vectors
    assert subspace_recall(ident, lex) == pytest.approx(
        projection_recall(ident, lex), abs=5e-10 + 1e-12
    )


@pytest.mark.skipif(
    __import__("platform").machine() not in ("x86_64", "AMD64"),
    reason="OpenBLAS's x86 kernels (OPENBLAS_CORETYPE) are chosen here",
)
def test_the_score_is_the_same_under_two_blas_kernels(tmp_path):
    """The hashed encoder's scores of repeated-token lexicons, computed under OpenBLAS's
    Haswell and Sandybridge kernels (two CPUs' choices, forced on this one): the same bytes."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from splits.hypotheses.triviality import HashedNgramEncoder, joined, subspace_recall\n"
        "e = HashedNgramEncoder('h', dims=512)\n"
        f"words = {IDENTITY!r}\n"
        "ident = e.encode([joined(words)])[0]\n"
        "for n in range(1, 30):\n"
        "    lex = e.encode([joined((words[:3] + ['finna', 'lowkey', 'shul']) * n)])[0]\n"
        "    print(repr(subspace_recall(ident, lex)))\n"
    )
    outputs = {}
    for kernel in ("Haswell", "Sandybridge"):
        env = {**__import__("os").environ, "OPENBLAS_CORETYPE": kernel}
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs[kernel] = proc.stdout
    assert len(outputs["Haswell"].split()) == 29
    assert outputs["Haswell"] == outputs["Sandybridge"]
