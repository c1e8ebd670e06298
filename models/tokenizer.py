"""The tokenizer of a suite model's task vocabulary, the one an HF export ships
(:mod:`models.hf.export`) and ``model.tokenizer`` returns: a ``PreTrainedTokenizerFast`` over a
checkpoint's task vocabulary, built with the ``tokenizers`` package, one token per symbol and our
ids. ``<BOS>``, ``<EOS>``, ``<PAD>`` are HF's bos / eos / pad, the other specials extra special
tokens. A one-character alphabet reads text character by character ("abc<COPY>abc"; whitespace
only separates unless it is a symbol, as in phone-book text); a longer one reads
whitespace-separated symbols ("s1 s0 s1") — the strings ``Vocab.decode`` prints and our models'
``to_tokens`` reads. Its post-processor puts ``<BOS>`` in front where the task has one (as our
tasks' sequences start), and it has no unknown token (a foreign symbol is an error).

Here, not in :mod:`models.hf` (whose package imports the registries), so the model base class
reaches it without importing the registry that finds the models.
"""

from __future__ import annotations

from collections import Counter

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers import models as tk_models
from transformers import PreTrainedTokenizerFast

from seqprobe.config import check
from tasks.base import Vocab

# HF roles of our special tokens (the others become extra special tokens)
SPECIAL_ROLES = {"BOS": "bos_token", "EOS": "eos_token", "PAD": "pad_token"}
MIN_POSITIONS = 2048  # max_position_embeddings when the run's context is shorter (RoPE/NoPE
# have no learned positions, so it bounds nothing in the model; tools read it as n_ctx)


def hf_tokenizer(vocab: Vocab, n_tokens: int, max_len: int = MIN_POSITIONS):
    """A ``PreTrainedTokenizerFast`` whose ids are ``vocab``'s (``n_tokens`` ≥ vocab.size; extra
    ids of a wider embedding become ``<unused{i}>``), built with the ``tokenizers`` package.

    It reads text as our models' ``to_tokens`` does and adds ``<BOS>`` in front (its
    post-processor) when the vocabulary has one, as our tasks' sequences start. It has no
    unknown token: our models have no id for one, and mapping a foreign symbol onto a task
    token would be a silent wrong input, so a symbol outside the vocabulary is an error."""
    check(n_tokens >= vocab.size, f"the model has {n_tokens} token ids but its task vocabulary "
          f"{vocab.size}")
    specials = [f"<{s}>" for s in vocab.specials]
    unused = [f"<unused{i}>" for i in range(n_tokens - vocab.size)]
    symbols = [*vocab.alphabet, *specials, *unused]
    dup = sorted(s for s, n in Counter(symbols).items() if n > 1)
    check(not dup, f"the task vocabulary repeats the symbol(s) {dup[:3]}: no tokenizer can "
          "give them distinct ids")
    ids = {s: i for i, s in enumerate(symbols)}
    if all(len(a) == 1 for a in vocab.alphabet):
        # Unigram without unk_id: a character outside the vocabulary raises "Encountered an
        # unknown token but `unk_id` is missing" (WordLevel's error would name an unknown
        # token, "[UNK]", as if the file had lost it). Unigram needs every character of a
        # word to be a piece, so it serves one-character alphabets only.
        tok = Tokenizer(tk_models.Unigram([(s, -1.0) for s in symbols], unk_id=None,
                                          byte_fallback=False))
        isolate = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        if any(a.isspace() for a in vocab.alphabet):  # phone-book text: spaces are tokens
            tok.pre_tokenizer = isolate
        else:  # whitespace only separates, as in our to_tokens ("a b c" is "abc")
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                         isolate])
        tok.decoder = decoders.Fuse()
    else:
        check(not any(c.isspace() for a in vocab.alphabet for c in a),
              "the task vocabulary has multi-character symbols with whitespace in them: "
              "no text form tells them apart")
        # one word per symbol; a word outside the vocabulary raises WordLevel's "Missing
        # [UNK] token" (the tokenizers library has no model that both keeps multi-character
        # words whole and refuses an unknown one in other words)
        tok = Tokenizer(tk_models.WordLevel(vocab=ids, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # decode joins with spaces
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in specials + unused])
    bos = "BOS" in vocab.specials
    if bos:  # the single and pair templates transformers itself writes for add_bos_token
        tok.post_processor = processors.TemplateProcessing(
            single="<BOS>:0 $A:0", pair="<BOS>:0 $A:0 <BOS>:1 $B:1",
            special_tokens=[("<BOS>", vocab.id("BOS"))])
    roles = {SPECIAL_ROLES[s]: f"<{s}>" for s in vocab.specials if s in SPECIAL_ROLES}
    extra = [f"<{s}>" for s in vocab.specials if s not in SPECIAL_ROLES] + unused
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_len,
                                   clean_up_tokenization_spaces=False, add_bos_token=bos,
                                   extra_special_tokens=extra, **roles)
