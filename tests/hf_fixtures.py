"""Tiny HuggingFace models for offline tests: a character-level tokenizer and causal LMs built
from configs (GPT-NeoX, GPT-2, Mamba, Mamba-2, Llama) and an encoder (BERT), saved with
``save_pretrained`` into a directory the way a user's download looks.

    from tests.hf_fixtures import save_tiny_hf
    path = save_tiny_hf("gpt_neox", tmp_path)       # -> tmp_path / "gpt_neox" (config.json …)

No network: every config is written out in full, weights are the architecture's random
initialisation under a fixed seed, and the tokenizer is built with the ``tokenizers`` package.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
import transformers as tf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# The tokenizer's alphabet: lower-case letters, digits, space and the punctuation the copy
# paper's prompts use (App. B: "Name: … Phone: …", newlines between examples).
CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " .,:;?!-'\n"
SPECIALS = ("<|endoftext|>", "<unk>", "<pad>")

# Small enough to build and run in well under a second on one CPU core, big enough to have
# several layers and heads (the analyses ask for per-head scores).
D_MODEL, N_LAYERS, N_HEADS, N_CTX = 32, 2, 4, 256


def char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast``: one token per character of
    :data:`CHARS`, ``<|endoftext|>`` as BOS/EOS, ``<unk>`` and ``<pad>``."""
    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # one piece per character ("." would skip newlines)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without separators
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<unk>",
                                   pad_token="<pad>", model_max_length=N_CTX)


def tiny_config(kind: str, vocab_size: int):
    """The config of a tiny ``kind`` model (see :data:`KINDS`)."""
    common = {"vocab_size": vocab_size, "bos_token_id": 0, "eos_token_id": 0,
              "pad_token_id": 2}
    if kind == "gpt_neox":
        return tf.GPTNeoXConfig(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS,
                                num_attention_heads=N_HEADS, intermediate_size=4 * D_MODEL,
                                max_position_embeddings=N_CTX, rotary_pct=0.25, **common)
    if kind == "gpt2":
        return tf.GPT2Config(n_embd=D_MODEL, n_layer=N_LAYERS, n_head=N_HEADS,
                             n_positions=N_CTX, **common)
    if kind == "llama":
        return tf.LlamaConfig(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS,
                              num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS,
                              intermediate_size=2 * D_MODEL, max_position_embeddings=N_CTX,
                              **common)
    if kind == "mamba":
        return tf.MambaConfig(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, state_size=8,
                              expand=2, conv_kernel=4, **common)
    if kind == "mamba2":
        # head_dim · num_heads = expand · hidden_size (the mixer's inner width)
        return tf.Mamba2Config(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, state_size=8,
                               expand=2, num_heads=N_HEADS, head_dim=2 * D_MODEL // N_HEADS,
                               n_groups=1, conv_kernel=4, chunk_size=16, **common)
    if kind == "bert":
        return tf.BertConfig(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS,
                             num_attention_heads=N_HEADS, intermediate_size=4 * D_MODEL,
                             max_position_embeddings=N_CTX, pad_token_id=2,
                             vocab_size=vocab_size)
    raise ValueError(f"unknown tiny model kind {kind!r}; allowed: {', '.join(KINDS)}")


KINDS = ("gpt_neox", "gpt2", "llama", "mamba", "mamba2", "bert")
CAUSAL_KINDS = ("gpt_neox", "gpt2", "mamba", "mamba2")


def tiny_hf_model(kind: str, seed: int = 0):
    """``(model, tokenizer)``: a tiny randomly initialised HF model of ``kind`` (eager
    attention, eval mode) and the character tokenizer."""
    tokenizer = char_tokenizer()
    cfg = tiny_config(kind, len(tokenizer))
    cls = tf.BertModel if kind == "bert" else tf.AutoModelForCausalLM
    torch.manual_seed(seed)
    if kind == "bert":
        model = cls(cfg)
    else:
        model = cls.from_config(cfg, attn_implementation="eager")
    return model.eval(), tokenizer


def save_tiny_hf(kind: str, root: str | Path, seed: int = 0) -> Path:
    """Build a tiny ``kind`` model and save it with its tokenizer into ``root / kind``; return
    that directory (what ``from_pretrained`` / ``models.load`` take)."""
    model, tokenizer = tiny_hf_model(kind, seed)
    out = Path(root) / kind
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# ---------------------------------------------------------------------------- hostile copies
def hf_copy(src: str | Path, dest: str | Path) -> Path:
    """A copy of the model directory ``src`` at ``dest`` (to damage without touching ``src``)."""
    import shutil

    return Path(shutil.copytree(src, dest))


def edit_json(path: str | Path, **fields) -> Path:
    """Set ``fields`` in the JSON object file ``path`` (a value ``None`` removes the key)."""
    import json

    path = Path(path)
    data = json.loads(path.read_text())
    for k, v in fields.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    path.write_text(json.dumps(data))
    return path


def edit_weights(directory: str | Path, edit) -> Path:
    """Rewrite ``directory / model.safetensors`` as ``edit(state_dict)`` (a new dict)."""
    from safetensors.torch import load_file, save_file

    path = Path(directory) / "model.safetensors"
    save_file(edit(load_file(path)), path, metadata={"format": "pt"})
    return path
