"""A tiny random-weight Llama model and tokenizer, built locally (nothing downloaded).

Used by tests and smoke runs of the ``transformers`` (and, where present, ``vllm``) backends:
a byte-level BPE tokenizer trained with ``tokenizers`` on a few sentences (so any text encodes),
with BOS/EOS/PAD special tokens and a chat template, and a 2-layer ``LlamaForCausalLM`` with
hidden size 64. Deterministic for a given seed; built once per output directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

TINY_FORMAT = 1
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
TRAINING_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "I am a teacher and I love my students.",
    "As a construction worker, I build houses every day.",
    "My family goes to church every Sunday morning.",
    "We discussed politics, sports, food and music on Reddit.",
    "This subreddit is about cooking recipes and baking bread.",
    "What do you think about the new phone release?",
    "Theory: group A writes more about work, group B about family.",
    "Answer: A",
    "Answer: B",
    "Post 1: hello world. Post 2: good morning everyone!",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
]


def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_SENTENCES * 4, trainer=trainer)
    from tokenizers.processors import TemplateProcessing

    tokenizer.post_processor = TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", tokenizer.token_to_id("<s>"))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _build(
    out_dir: Path,
    seed: int,
    hidden_size: int,
    num_attention_heads: int,
    positions: int,
    layers: int,
) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _train_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=max(1, num_attention_heads // 2),
        max_position_embeddings=positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        initializer_range=0.2,  # peaked logits: greedy choices are far from ties
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.do_sample = False
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    num_attention_heads: int = 4,
    max_position_embeddings: int = 1024,
    num_hidden_layers: int = 2,
) -> Path:
    """Build (once per ``out_dir`` and settings) and return the directory of a tiny Llama model
    that ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` (and vLLM)
    load. vLLM's attention kernels want a head size of 64 or more: use ``hidden_size=128,
    num_attention_heads=2`` there. ``max_position_embeddings`` is its context (its byte-level
    tokenizer of 512 tokens spends about one token per 1-2 characters of Reddit text);
    ``num_hidden_layers`` with a larger ``hidden_size`` makes a model of a realistic size for
    timing an engine on a GPU (random weights, the same tiny tokenizer)."""
    out_dir = Path(out_dir)
    marker = out_dir / "tiny_build.json"
    expected = {
        "format": TINY_FORMAT,
        "seed": seed,
        "hidden_size": hidden_size,
        "num_attention_heads": num_attention_heads,
    }
    if max_position_embeddings != 1024:  # earlier builds' markers stay valid
        expected["max_position_embeddings"] = max_position_embeddings
    if num_hidden_layers != 2:
        expected["num_hidden_layers"] = num_hidden_layers
    if marker.exists():
        try:
            if json.loads(marker.read_text()) == expected:
                return out_dir
        except (OSError, json.JSONDecodeError):
            pass
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _build(
            staging,
            seed,
            hidden_size,
            num_attention_heads,
            max_position_embeddings,
            num_hidden_layers,
        )
        (staging / "tiny_build.json").write_text(json.dumps(expected))
        if out_dir.exists():
            shutil.rmtree(out_dir, ignore_errors=True)
        try:
            os.replace(staging, out_dir)
        except OSError:
            # another process finished the same build first
            if not (marker.exists() and json.loads(marker.read_text()) == expected):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out_dir
