"""Tiny random configs of the Hugging Face causal LM families that sharding is tested on, and a
Llama-style tokenizer (SentencePiece-like, adds BOS) built locally: no download.

Each family keeps what sets it apart at tiny size: GPT-NeoX's partial rotary and parallel
residual, grouped-query attention (Llama, Mistral, Qwen2, Gemma), Mistral's sliding window,
OLMo-2's QK norms, OPT's learned positions, Gemma's tied embeddings and scaled inputs.
"""

from __future__ import annotations

from pathlib import Path

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "max_position_embeddings": 64}
ROTARY = {**SMALL, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}

# family -> (Hugging Face config, the block class it declares, the tokenizer it is tested with)
FAMILIES: dict[str, tuple[dict, str, str]] = {
    "gpt2": (
        {
            "model_type": "gpt2",
            "n_layer": 2,
            "n_embd": 32,
            "n_head": 2,
            "n_positions": 64,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
        },
        "GPT2Block",
        "byte_level",
    ),
    "gpt_neox": (
        {
            "model_type": "gpt_neox",
            **SMALL,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "rotary_pct": 0.25,
            "use_parallel_residual": True,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        },
        "GPTNeoXLayer",
        "byte_level",
    ),
    "llama": ({"model_type": "llama", **ROTARY}, "LlamaDecoderLayer", "llama_style"),
    "mistral": (
        {"model_type": "mistral", **ROTARY, "sliding_window": 16},
        "MistralDecoderLayer",
        "llama_style",
    ),
    "qwen2": ({"model_type": "qwen2", **ROTARY}, "Qwen2DecoderLayer", "byte_level"),
    "olmo2": ({"model_type": "olmo2", **ROTARY}, "Olmo2DecoderLayer", "byte_level"),
    "opt": (
        {
            "model_type": "opt",
            **SMALL,
            "ffn_dim": 64,
            "num_attention_heads": 2,
            "word_embed_proj_dim": 32,
            "dropout": 0.0,
            "attention_dropout": 0.0,
        },
        "OPTDecoderLayer",
        "byte_level",
    ),
    "gemma": (
        {"model_type": "gemma", **ROTARY, "num_key_value_heads": 1, "head_dim": 8},
        "GemmaDecoderLayer",
        "llama_style",
    ),
}

# Words the Llama-style tokenizer has whole (with SentencePiece's word-start mark); everything
# else falls apart into characters, and characters outside printable ASCII into <unk>.
WORDS = [
    "Question:", "Answer:", "What", "is", "the", "capital", "of", "France", "Paris", "Which",
    "one", "keeps", "bread", "fresh", "Seal", "it", "in", "a", "bag", "The", "quick", "brown",
    "fox", "jum", "jumps", "over", "yes", "no",
]  # fmt: skip
MARK = "\u2581"  # SentencePiece's "▁": a space, and the start of every text


def llama_style_tokenizer():
    """A tokenizer that behaves like Llama-2's (`LlamaTokenizerFast`, legacy): a word-start mark
    prepended to the text and standing for every space, BPE that never merges across words, and
    BOS `<s>` added in front. Its vocabulary and merges are spelled out here (deterministic):
    printable ASCII, and :data:`WORDS` built letter by letter."""
    import string

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for piece in ["<unk>", "<s>", "</s>", MARK, *sorted(set(string.printable) - set(" \t\r\v\f"))]:
        vocab.setdefault(piece, len(vocab))
    merges: list[tuple[str, str]] = []
    for word in WORDS:
        piece = MARK + word
        for end in range(2, len(piece) + 1):
            merge = (piece[: end - 1], piece[end - 1])
            if merge not in merges:
                merges.append(merge)
                vocab.setdefault(piece[:end], len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    backend.normalizer = normalizers.Sequence(
        [normalizers.Prepend(MARK), normalizers.Replace(" ", MARK)]
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace(MARK, prepend_scheme="never", split=True)
    backend.decoder = decoders.Sequence(
        [decoders.Replace(MARK, " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def save_llama_style_tokenizer(directory: Path) -> str:
    """The tokenizer as a directory that `tokenizer:` in a model block can name."""
    llama_style_tokenizer().save_pretrained(directory)
    return str(directory)


def model_spec(family: str, tokenizers: dict[str, str]) -> dict:
    """A `catwalk::rank_classifier` block for the family's tiny config; `tokenizers` maps the
    family's tokenizer kind to a name or path."""
    config, _, tokenizer = FAMILIES[family]
    return {
        "type": "catwalk::rank_classifier",
        "config": dict(config),
        "tokenizer": tokenizers[tokenizer],
    }
