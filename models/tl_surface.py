"""TransformerLens' ``HookedTransformer`` surface on a suite model (a mixin of
:class:`models.base.SuiteModel`), so a TL user's habits carry over: the stacked weights
(``W_E``, ``W_U``, ``b_U``, ``W_Q`` … ``b_out``), ``OV`` / ``QK`` as ``FactoredMatrix``,
``accumulated_bias`` and ``tokens_to_residual_directions`` (what ``ActivationCache`` reads),
``generate``, ``tokenizer``, ``loss_fn``, ``to_single_str_token``, ``get_token_position``.

Shapes and meanings are TL's (``W_Q``: ``[n_layers, n_heads, d_model, d_head]``, ``W_U``:
``[d_model, d_vocab]``), so the numbers equal those of the same model exported to HF and booted
through ``TransformerBridge`` (tests/unit/models/test_tl_surface.py; docs/tl_surface.md lists each method).
The stacks are new tensors built from each block's parameters, as TL's are: reading them is
free of side effects, writing into one changes nothing in the model.

Where a name cannot mean on this architecture what it means in TL (``W_Q`` of a Mamba, ``W_pos``
of any suite model: none has a position table) the answer is one :class:`NotInThisModel` line
with the reason, an ``AttributeError`` too, so ``hasattr`` and ``getattr(model, name, None)``
(TL's own code uses both) read the name as absent.
"""

from __future__ import annotations

import contextlib
import difflib

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import FactoredMatrix
from transformer_lens.utilities.matrix import composition_scores

from models import weight_processing
from models.outputs import log_probs, next_token_loss
from seqprobe.config import check
from seqprobe.errors import InputError

NEAR_MATCHES = 3  # how many near names a "no such hook" line offers


class NotInThisModel(InputError, AttributeError):
    """A TransformerLens attribute this architecture has no counterpart for (one line: why)."""


def near_matches(name: str, names) -> str:
    """``"; did you mean 'a', 'b'?"`` for the names of ``names`` closest to ``name`` (difflib),
    or ``""`` when none is close: the tail of a "no such hook" line."""
    close = difflib.get_close_matches(name, list(names), n=NEAR_MATCHES, cutoff=0.6)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


@contextlib.contextmanager
def neuron_width(cfg):
    """``cfg.d_mlp`` as the MLP's width for the duration (TL labels neurons by ``cfg.d_mlp``;
    a transformer config's ``d_mlp=0`` means 4·d_model, its ``d_mlp_``). ``cfg`` is the model's
    own copy (:class:`models.base.SuiteModel` keeps one); the stored 0 is put back after."""
    width = getattr(cfg, "d_mlp_", None)
    if getattr(cfg, "d_mlp", None) != 0 or not width:
        yield
        return
    object.__setattr__(cfg, "d_mlp", width)
    try:
        yield
    finally:
        object.__setattr__(cfg, "d_mlp", 0)


def cache_refusal(model, method: str, layer: int | None = None, mlp_input: bool = False
                  ) -> None:
    """One :class:`InputError` line where TL's ``ActivationCache.<method>`` cannot mean on
    ``model`` what it means in TL; nothing where it can (:class:`models.base.SuiteActivationCache`
    asks before running TL's)."""
    hooks, arch = getattr(model, "hook_dict", {}), getattr(model, "arch", type(model).__name__)
    if method == "decompose_resid":
        check("blocks.0.hook_attn_out" in hooks,
              f"decompose_resid splits the residual stream into each block's attn_out and "
              f"mlp_out, and this {arch} model's blocks write no attn_out (they mix tokens "
              "without attention): accumulated_resid and the blocks' own hooks "
              "(model.hook_names()) read its stream")
    elif method == "apply_ln_to_stack" and layer is not None and 0 <= layer < model.cfg.n_layers:
        norm = f"blocks.{layer}.ln{2 if mlp_input else 1}"
        check(model.cfg.normalization_type is None or f"{norm}.hook_scale" in hooks,
              f"apply_ln before block {layer} divides by TL's {norm}.hook_scale, and this {arch} "
              f"model's blocks have no {norm} (its norms: " + ", ".join(sorted(
                  {n.rsplit(".", 1)[0] for n in hooks if n.startswith(f"blocks.{layer}.")
                   and n.endswith(".hook_scale")})) + "); at the final norm (layer=None) it works")
    elif method.startswith("compute_ssm"):
        check(not any(n.endswith("mixer.hook_ssm_state") for n in hooks),
              f"{method} reads TransformerLens' SSM bridge components, which a suite {arch} "
              "model is not: its cache holds the state itself (blocks.{i}.mixer.hook_ssm_state) "
              "and probes.effective_attention.effective_attention(model, cache, layer) gives "
              "the effective attention")
        raise InputError(f"{method} needs SSM layers, and this {arch} model has none")


def sample_next(logits: Float[Tensor, "batch vocab"], do_sample: bool, temperature: float,
                top_k: int | None, top_p: float | None, seen: Int[Tensor, "batch pos"],
                freq_penalty: float = 0.0, repetition_penalty: float = 1.0
                ) -> Int[Tensor, " batch"]:
    """TL's ``sample_logits``: argmax, or a draw from the softmax of ``logits / temperature``
    restricted to the ``top_k`` tokens and the ``top_p`` mass. ``repetition_penalty`` (HF's:
    the logits of tokens in ``seen`` divided by it where positive, multiplied where negative)
    applies to both; ``freq_penalty`` (minus it times each token's count in ``seen``) to
    sampling only, as in TL."""
    logits = logits.float()
    if repetition_penalty != 1.0:
        picked = logits.gather(-1, seen)
        picked = torch.where(picked > 0, picked / repetition_penalty, picked * repetition_penalty)
        logits = logits.scatter(-1, seen, picked)
    if not do_sample or temperature == 0.0:
        return logits.argmax(dim=-1)
    if freq_penalty:
        logits = logits - freq_penalty * torch.zeros_like(logits).scatter_add(
            -1, seen, torch.ones_like(seen, dtype=logits.dtype))
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        ordered, order = logits.sort(dim=-1, descending=True)
        mass = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = mass - ordered.softmax(dim=-1) >= top_p  # keeps the token that crosses top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1)[:, 0]


class TLSurface:
    """The ``HookedTransformer`` names of :mod:`models.tl_surface` (a mixin: reads ``blocks``,
    ``embed``, ``unembed``, ``cfg``, ``arch`` and :class:`models.text.TaskText`'s text methods)."""

    def __getattr__(self, name: str):
        # A property that raises AttributeError makes Python fall back to __getattr__, whose
        # torch.nn.Module form would replace the refusal's reason with "no attribute 'W_Q'":
        # run the property again so its own line is the one raised.
        if name in TL_PROPERTIES:
            getattr(type(self), name).fget(self)
        return super().__getattr__(name)

    # ------------------------------------------------------------------ weights
    def _heads(self, name: str) -> list:
        """Each block's attention module, or one line saying this model has none."""
        attns = [getattr(b, "attn", None) for b in self.blocks]
        if any(a is None for a in attns):
            raise NotInThisModel(
                f"{name} is made of attention weights, and this {self.arch} model has no "
                "attention heads (its blocks mix tokens with a recurrence or a filter): read its "
                "own parameters (model.blocks[i]) or the hooks it has (model.hook_names())")
        return attns

    def _mlps(self, name: str) -> list:
        """Each block's TL-shaped MLP (``W_in``, ``b_in``, ``W_out``, ``b_out``), or one line."""
        mlps = [getattr(b, "mlp", None) for b in self.blocks]
        if not all(hasattr(m, "W_in") for m in mlps):
            raise NotInThisModel(
                f"{name} is TransformerLens' MLP weight (act(x W_in + b_in) W_out + b_out), and "
                f"this {self.arch} model's blocks have "
                + ("no MLP" if all(m is None for m in mlps) else
                   "a gated MLP (fc1 holds a value and a gate half, no biases): read "
                   "model.blocks[i].mlp"))
        return mlps

    def _stack(self, modules: list, attr: str) -> Tensor:
        return torch.stack([getattr(m, attr) for m in modules], dim=0)

    @property
    def W_E(self) -> Float[Tensor, "d_vocab d_model"]:
        return self.embed.weight

    @property
    def W_U(self) -> Float[Tensor, "d_model d_vocab_out"]:
        return self.unembed.weight.T

    @property
    def b_U(self) -> Float[Tensor, " d_vocab_out"]:
        """The unembedding bias (zeros where the unembedding has none, as TL's is)."""
        bias = self.unembed.bias
        return bias if bias is not None else self.unembed.weight.new_zeros(
            self.unembed.weight.shape[0])

    @property
    def W_pos(self) -> Tensor:
        raise NotInThisModel(
            "W_pos is a learned absolute position table, and no suite model has one (NoPE, "
            "ALiBi, Hard-ALiBi and RoPE add position inside attention; recurrences and filters "
            "need none)")

    W_Q = property(lambda self: self._stack(self._heads("W_Q"), "W_Q"),
                   doc="[n_layers, n_heads, d_model, d_head]")
    W_K = property(lambda self: self._stack(self._heads("W_K"), "W_K"),
                   doc="[n_layers, n_heads, d_model, d_head]")
    W_V = property(lambda self: self._stack(self._heads("W_V"), "W_V"),
                   doc="[n_layers, n_heads, d_model, d_head]")
    W_O = property(lambda self: self._stack(self._heads("W_O"), "W_O"),
                   doc="[n_layers, n_heads, d_head, d_model]")
    b_Q = property(lambda self: self._stack(self._heads("b_Q"), "b_Q"),
                   doc="[n_layers, n_heads, d_head]")
    b_K = property(lambda self: self._stack(self._heads("b_K"), "b_K"),
                   doc="[n_layers, n_heads, d_head]")
    b_V = property(lambda self: self._stack(self._heads("b_V"), "b_V"),
                   doc="[n_layers, n_heads, d_head]")
    b_O = property(lambda self: self._stack(self._heads("b_O"), "b_O"), doc="[n_layers, d_model]")
    W_in = property(lambda self: self._stack(self._mlps("W_in"), "W_in"),
                    doc="[n_layers, d_model, d_mlp]")
    b_in = property(lambda self: self._stack(self._mlps("b_in"), "b_in"), doc="[n_layers, d_mlp]")
    W_out = property(lambda self: self._stack(self._mlps("W_out"), "W_out"),
                     doc="[n_layers, d_mlp, d_model]")
    b_out = property(lambda self: self._stack(self._mlps("b_out"), "b_out"),
                     doc="[n_layers, d_model]")

    @property
    def QK(self) -> FactoredMatrix:
        """``W_Q W_Kᵀ`` per head, [n_layers, n_heads, d_model, d_model] (before RoPE: TL's too)."""
        self._heads("QK")
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """``W_V W_O`` per head, [n_layers, n_heads, d_model, d_model]."""
        self._heads("OV")
        return FactoredMatrix(self.W_V, self.W_O)

    def accumulated_bias(self, layer: int, mlp_input: bool = False,
                         include_mlp_biases: bool = True) -> Float[Tensor, " d_model"]:
        """What the biases of the blocks before ``layer`` add to the residual stream (each
        attention's ``b_O`` and, with ``include_mlp_biases``, each MLP's ``b_out``; with
        ``mlp_input`` the attention bias of ``layer`` too): TL's, read by
        ``ActivationCache.get_full_resid_decomposition``."""
        attns, mlps = self._heads("accumulated_bias"), self._mlps("accumulated_bias")
        total = self.W_E.new_zeros(self.cfg.d_model)
        for i in range(layer):
            total = total + attns[i].b_O + (mlps[i].b_out if include_mlp_biases else 0)
        if mlp_input:
            check(layer < self.cfg.n_layers, "mlp_input=True needs a layer < n_layers")
            total = total + attns[layer].b_O
        return total

    def tokens_to_residual_directions(self, tokens: str | int | Tensor
                                      ) -> Float[Tensor, "... d_model"]:
        """The columns of ``W_U`` of ``tokens`` (a token as text or id, or a tensor of ids:
        ``[*tokens.shape, d_model]``). As in TL, the final norm's weight is in them only once
        folded (:meth:`process_weights`): suite models load unprocessed, as the bridge does."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        if isinstance(tokens, Tensor) and tokens.numel() > 1:
            return self.W_U[:, tokens].movedim(0, -1)
        return self.W_U[:, int(tokens)]

    # ------------------------------------------------------------------ weight processing
    # TL's HookedTransformer folds at load time (from_pretrained) and its fold_layer_norm takes a
    # state dict; a suite model is processed in place when asked, and returns itself so that
    # ``m = models.load(p).process_weights()`` reads as TL's load does.
    def fold_layer_norm(self, fold_biases: bool = True, center_weights: bool = True):
        """Fold every LayerNorm's weight and bias into the weights that read it, centring
        them (TL's ``fold_layer_norm``; :mod:`models.weight_processing`). In place."""
        weight_processing.fold_layer_norm(self, fold_biases, center_weights)
        return self

    def center_writing_weights(self):
        """TL's ``center_writing_weights`` (:mod:`models.weight_processing`). In place."""
        weight_processing.center_writing_weights(self)
        return self

    def center_unembed(self):
        """TL's ``center_unembed`` (:mod:`models.weight_processing`). In place."""
        weight_processing.center_unembed(self)
        return self

    def fold_value_biases(self):
        """TL's ``fold_value_biases`` (:mod:`models.weight_processing`). In place."""
        weight_processing.fold_value_biases(self)
        return self

    def process_weights(self, fold_ln: bool = True, center_writing_weights: bool = True,
                        center_unembed: bool = True, fold_value_biases: bool = True):
        """TL's ``process_weights`` with its defaults (what ``HookedTransformer.from_pretrained``
        and ``TransformerBridge.enable_compatibility_mode()`` apply): afterwards
        ``cache.logit_attrs`` of ``decompose_resid`` adds up to the logit difference. In
        place; a model that cannot be folded is one line why."""
        weight_processing.process_weights(self, fold_ln, center_writing_weights, center_unembed,
                                          fold_value_biases)
        return self

    def all_composition_scores(self, mode: str
                               ) -> Float[Tensor, "n_layers n_heads n_layers n_heads"]:
        """TL's composition scores of every pair of heads (Elhage et al. 2021):
        ``‖OV_left · M_right‖_F / (‖OV_left‖_F ‖M_right‖_F)``, ``M`` the right head's ``QK``
        (``mode="Q"``), ``QKᵀ`` (``"K"``) or ``OV`` (``"V"``); zero unless the left head's
        layer is before the right head's. Read after :meth:`process_weights` for TL's
        numbers (TL computes them on processed weights)."""
        check(mode in ("Q", "K", "V"), f"mode must be one of 'Q', 'K', 'V', got {mode!r}")
        left = self.OV
        right = {"Q": lambda: self.QK, "K": lambda: self.QK.T, "V": lambda: left}[mode]()
        scores = composition_scores(left, right, broadcast_dims=True)
        mask = weight_processing.composition_mask(self.cfg.n_layers, scores.device)
        return torch.where(mask, scores, torch.zeros_like(scores))

    # ------------------------------------------------------------------ text
    @property
    def tokenizer(self):
        """A ``transformers.PreTrainedTokenizerFast`` of the task vocabulary, the one an HF
        export ships (:func:`models.tokenizer.hf_tokenizer`: our ids, ``<BOS>`` put in
        front as the tasks' sequences start). Built on first use and kept."""
        vocab = self.task_vocab
        cached = self.__dict__.get("_tl_tokenizer")
        if cached is None or cached[0] is not vocab:
            # deferred: transformers takes seconds to import, and only a model asked for its
            # tokenizer needs it
            from models.tokenizer import hf_tokenizer

            cached = (vocab, hf_tokenizer(vocab, self.cfg.vocab_size))
            self.__dict__["_tl_tokenizer"] = cached
        return cached[1]

    def to_single_str_token(self, int_token: int) -> str:
        """The symbol of one token id (``<BOS>``, ``a`` …)."""
        check(isinstance(int_token, int), f"to_single_str_token takes an int, got {int_token!r}")
        return self.task_vocab.symbols[int_token]

    def get_token_position(self, single_token: str | int, input: str | Tensor,
                           mode: str = "first", prepend_bos: bool | None = None,
                           padding_side: str | None = None) -> int:
        """Where ``single_token`` (text or id) first (``mode="first"``) or last occurs in one
        sequence (text, as :meth:`to_tokens` writes it, or ``[pos]`` / ``[1, pos]`` ids)."""
        check(mode in ("first", "last"), f"mode must be 'first' or 'last', got {mode!r}")
        tokens = (self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)
                  if isinstance(input, str) else input)
        if tokens.dim() == 2:
            check(tokens.shape[0] == 1, f"ids of rank two must be [1, pos], got "
                                        f"{tuple(tokens.shape)}")
            tokens = tokens[0]
        token = (self.to_single_token(single_token) if isinstance(single_token, str)
                 else int(single_token))
        where = (tokens == token).nonzero()[:, 0]
        check(len(where) > 0, f"token {token} ({self.to_single_str_token(token)!r}) does not "
                              "occur in the input")
        return int(where[0] if mode == "first" else where[-1])

    def loss_fn(self, logits: Float[Tensor, "batch pos vocab"], tokens: Int[Tensor, "batch pos"],
                attention_mask: Tensor | None = None, per_token: bool = False) -> Tensor:
        """TL's next-token cross-entropy of ``logits`` against ``tokens``
        (:func:`models.outputs.next_token_loss`, what ``return_type="loss"`` computes)."""
        mask = None if attention_mask is None else attention_mask.bool()
        return next_token_loss(log_probs(logits), tokens, mask, per_token)

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, input: str | list[str] | Tensor = "", max_new_tokens: int = 10,
                 stop_at_eos: bool = True, eos_token_id: int | None = None,
                 do_sample: bool = True, top_k: int | None = None, top_p: float | None = None,
                 temperature: float = 1.0, freq_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, use_past_kv_cache: bool = True,
                 prepend_bos: bool | None = None, padding_side: str | None = None,
                 return_type: str | None = "input", verbose: bool = True):
        """TL's ``generate``: ``max_new_tokens`` tokens after ``input``, drawn from the softmax
        (``do_sample``, TL's default; ``temperature``, ``top_k``, ``top_p``, the penalties of
        :func:`sample_next`) or greedy (``do_sample=False``:
        :func:`models.generation.greedy_decode`'s argmax). Text is read as :meth:`to_tokens`
        reads it, ``<BOS>`` first as the task writes its sequences (what ``greedy_decode`` of a
        task batch sees). Strings of different lengths are refused: no suite model takes an
        attention mask, so padding would be read as input. Returns prompt and continuation:
        text for text input (``return_type="input"``, or ``"str"``), ids for ids (or
        ``"tokens"``). A row that writes ``<EOS>`` is padded with it afterwards
        (``stop_at_eos``); all done, it stops. Every step re-runs the whole sequence (no KV
        cache: ``use_past_kv_cache`` and ``verbose`` are accepted for TL's signature), so hooks
        see full-sequence activations.
        """
        check(return_type in ("input", "str", "tokens"),
              f"return_type must be 'input', 'str' or 'tokens', got {return_type!r}")
        text = not isinstance(input, Tensor)
        if text:
            tokens, mask = self.tokens_and_mask(input, prepend_bos, padding_side)
            check(mask is None, "generate takes strings of one length (no suite model takes an "
                                "attention mask, so padding would be read as input): generate "
                                "them one at a time, or group them by length")
            tokens = tokens.to(self.cfg.device)
        else:
            tokens = self.to_tokens(input)
        check(tokens.shape[1] >= 1, "generate needs at least one token to start from (the task "
                                    "has no <BOS> to start an empty prompt with)")
        if eos_token_id is None and stop_at_eos and self.task is not None:
            specials = self.task_vocab.specials
            eos_token_id = self.task_vocab.id("EOS") if "EOS" in specials else None
        done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        for _ in range(max_new_tokens):
            nxt = sample_next(self(tokens)[:, -1], do_sample, temperature, top_k, top_p, tokens,
                              freq_penalty, repetition_penalty)
            if stop_at_eos and eos_token_id is not None:
                nxt = nxt.masked_fill(done, eos_token_id)
                done = done | (nxt == eos_token_id)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            if stop_at_eos and bool(done.all()):
                break
        if return_type == "tokens" or (return_type == "input" and not text):
            return tokens
        out = self.to_string(tokens)
        return out[0] if isinstance(input, str) else out


# the names whose refusal TLSurface.__getattr__ keeps
TL_PROPERTIES = frozenset(n for n, v in vars(TLSurface).items() if isinstance(v, property))
