"""What the state-space language models (Mamba-2, MambaZero, Mamba) share.

    embedding -> n × [resid + mixer(norm(resid)) (+ resid + mlp(norm2(resid)))] -> ln_final
              -> unembed  (-> softmax, or MambaZero's L1 normalisation)

Each model file supplies its mixer (:class:`SSMMixer` subclass) and config; this module holds
the LM wrapper, the config fields every selective SSM has, the linear recurrence they all run
(reference loop and log-depth scan, next to each other), Δ's initialisation, the lazy import of
mamba-ssm kernels, and the renaming between our state dicts and HF / mamba-ssm's.

Glossary (code name -> symbol, Markov paper §2.2 / Mamba papers):
    d_model, expand   d and e: d_inner = e·d is the width of x_t
    d_state           N, the state width
    d_conv            w, the causal convolution window
    dt_min, dt_max    range of the initial Δ = softplus(bias) (mamba-ssm's initialisation)
    prediction        softmax, or "l1": p ∝ |readout| (MambaZero's Prediction layer, §4.1)
    unembed_bias_init the unembedding bias at init (None: zero), set after every random draw
"""

from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.utils.checkpoint
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel, TLConfigFields
from models.contract import Shapes
from models.layers import GatedMLP, RMSNorm, has_hooks
from seqprobe.config import check
from seqprobe.flags import (
    EPS_FIELD,
    INIT_STD_FIELD,
    LAYERS_FIELD,
    MAX_CONV,
    MAX_DIM,
    MAX_SCALE,
    MAX_WIDTH_MULT,
    MLP_FIELD,
    VOCAB_FIELD,
    WIDTH_FIELD,
    bound,
)

SSM_ACTIVATIONS = ("silu", "relu", "identity")  # after the conv and on the gate
PREDICTIONS = ("softmax", "l1")


# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class SSMLMConfig(TLConfigFields):
    """Fields shared by the state-space language models (Mamba-2, MambaZero, Mamba-1)."""

    SCANS: ClassVar[tuple[str, ...]] = ("auto", "plain")  # each model's paths (``scan``)
    vocab_size: int = field(default=2, metadata=VOCAB_FIELD)
    d_model: int = field(default=32, metadata=WIDTH_FIELD)
    n_layers: int = field(default=1, metadata=LAYERS_FIELD)
    d_mlp: int = field(  # > 0: a gated MLP after each mixer (Markov paper Fig. 2 / App. B); 0: none
        default=0, metadata=MLP_FIELD)
    mlp_act: str = "relu"  # the paper's MLP: W_2[ReLU(W_1 u) ⊙ W_3 u]
    block_norm: bool = True  # RMSNorm before the mixer (and before the MLP)
    final_norm: bool = True  # RMSNorm before the unembedding (ln_final)
    norm_eps: float = field(default=1e-5, metadata=EPS_FIELD)
    unembed_bias: bool = False
    # the unembedding bias at init (needs unembed_bias). An L1-prediction model starts with
    # every output ≈ 0, clamps the negative ones (no gradient) and falls into the uniform
    # predictor; a positive start gives every output a gradient (the add-β logits β + n are
    # positive too). Set after all random draws, so the rest of the init is unchanged.
    unembed_bias_init: float | None = field(
        default=None, metadata=bound(-MAX_SCALE, MAX_SCALE, "an initial bias"))
    prediction: str = "softmax"  # softmax | l1 (MambaZero's L1-normalised prediction, §4.1)
    l1_eps: float = field(  # l1: p ∝ max(|v|, l1_eps) (see SSMLanguageModel.compute_logits)
        default=1e-6, metadata=EPS_FIELD)
    init_std: float = field(  # embedding / unembedding init (mamba-ssm: 0.02)
        default=0.02, metadata=INIT_STD_FIELD)
    use_kernels: bool = True  # on CUDA with mamba-ssm installed, its kernels when allowed
    scan: str = "auto"  # force a path (see each model's docstring); auto picks the fastest
    # the mixer (both Mamba generations)
    expand: int = field(  # e
        default=2, metadata=bound(1, MAX_WIDTH_MULT, "Mamba's expansion; papers: 2"))
    d_state: int = field(  # N (the copy paper's "state size S" sweeps 16..256 and keeps 32)
        default=16, metadata=bound(1, MAX_DIM, "the SSM state size N; papers: up to 128"))
    d_conv: int = field(  # w
        default=4, metadata=bound(1, MAX_CONV, "the causal conv's width; papers: 2 to 4"))
    conv: bool = True  # ablation: False removes the convolution (Markov paper §3, Fig. 3a)
    conv_bias: bool = True
    activation: str = "silu"  # after the conv and on the gate: silu | relu | identity
    gated: bool = True  # ablation: False removes z and the gate y ⊙ act(z)
    use_D: bool = True
    proj_bias: bool = False  # bias of in_proj / out_proj (HF use_bias)
    dt_min: float = field(  # Δ initialisation range (mamba-ssm / HF defaults)
        default=0.001, metadata=bound(0.0, MAX_SCALE, "an initial step size; papers: 1e-3"))
    dt_max: float = field(
        default=0.1, metadata=bound(0.0, MAX_SCALE, "an initial step size; papers: 0.1"))
    dt_init_floor: float = field(
        default=1e-4, metadata=bound(0.0, MAX_SCALE, "an initial step size; papers: 1e-4"))

    def __post_init__(self):
        check(self.mlp_act in SSM_ACTIVATIONS, f"mlp_act must be one of {SSM_ACTIVATIONS}")
        check(self.activation in SSM_ACTIVATIONS,
              f"activation must be one of {SSM_ACTIVATIONS}, got {self.activation!r}")
        check(self.prediction in PREDICTIONS,
              f"prediction must be one of {PREDICTIONS}, got {self.prediction!r}")
        check(self.init_std > 0, f"init_std must be > 0, got {self.init_std}")
        check(self.unembed_bias_init is None or self.unembed_bias,
              "unembed_bias_init needs unembed_bias=True")
        check(0 < self.dt_min <= self.dt_max, "need 0 < dt_min <= dt_max")
        check(self.scan in self.SCANS, f"scan must be one of {self.SCANS}, got {self.scan!r}")

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def normalization_type(self) -> str | None:
        """TL's name of the final norm (an RMSNorm), which ``apply_ln`` reads."""
        return "RMS" if self.final_norm else None


def init_dt_bias(n: int, cfg: SSMLMConfig) -> Float[Tensor, " n"]:
    """mamba-ssm's Δ bias: Δ log-uniform in [dt_min, dt_max] (floored), then softplus⁻¹(Δ), so
    the initial softplus(bias) is that Δ."""
    dt = torch.exp(torch.rand(n) * (math.log(cfg.dt_max) - math.log(cfg.dt_min))
                   + math.log(cfg.dt_min)).clamp(min=cfg.dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))  # inverse softplus


# ---------------------------------------------------------------------------- scans
def linear_scan_plain(a: Float[Tensor, "batch pos *#state"], w: Float[Tensor, "batch pos *state"],
                      h0: Float[Tensor, "batch ..."] | None = None
                      ) -> Float[Tensor, "batch pos *state"]:
    """h_t = a_t·h_{t−1} + w_t (h_0 = 0, or ``h0``) along dim 1, by a loop: the reference every
    faster path is tested against, and the path that materialises every h_t."""
    h = torch.zeros_like(w[:, 0]) if h0 is None else h0
    out = []
    # unbind, not a[:, t]: the backward of each indexing op would write a zero tensor of the
    # full [batch, pos, ...] size (quadratic in the length); unbind's backward is one stack
    for a_t, w_t in zip(a.unbind(1), w.unbind(1), strict=True):
        h = a_t * h + w_t
        out.append(h)
    return torch.stack(out, dim=1)


def carried_states(hook: HookPoint, states: Float[Tensor, "batch pos *state"],
                   a: Float[Tensor, "batch pos *#state"], write: Float[Tensor, "batch pos *state"],
                   h0: Float[Tensor, "batch ..."] | None = None
                   ) -> Float[Tensor, "batch pos *state"]:
    """``states`` (H_t of h_t = a_t·h_{t−1} + w_t) through ``hook`` (``hook_ssm_state``), with
    an edit carried forward as the recurrence carries it: where the hook changed an entry of
    H_t, H_t holds what the hook wrote, and every later H_s is the recurrence run on from it
    (h_s = a_s·h_{s−1} + w_s from the edited state), so zeroing H_t moves the outputs at t and
    after, as patching a residual stream does. Entries the hook left alone keep following the
    recurrence from the edited past. A hook that only reads (the cache's) changes nothing."""
    if not has_hooks(hook):
        return hook(states)
    seen = states.clone()  # the hook may edit in place: compare against what the scan gave
    edited = hook(seen)
    if states.device.type == "meta":  # a size estimate: no values to compare, none to carry
        return edited
    changed = ~((edited == states) | (edited.isnan() & states.isnan()))
    if not bool(changed.any()):
        return edited
    # the entries a hook set restart the recurrence: h_t = 0·h_{t−1} + (what it wrote)
    return linear_scan_plain(torch.where(changed, 0.0, a.expand_as(states)),
                             torch.where(changed, edited, write), h0)


def linear_scan_parallel(a: Float[Tensor, "batch pos *state"], w: Float[Tensor, "batch pos *state"]
                         ) -> Float[Tensor, "batch pos *state"]:
    """The same recurrence by a Hillis–Steele scan: log2(T) steps of whole-tensor operations.

    Each step composes every affine map h -> a_t h + w_t with the one ``off`` steps earlier,
    (a, w)_t ∘ (a, w)_{t−off} = (a_t a_{t−off}, a_t w_{t−off} + w_t), so after the step with
    offset 2^j position t holds the composition of the last 2^(j+1) maps.
    """
    T = w.shape[1]
    off = 1
    while off < T:
        w = torch.cat([w[:, :off], w[:, off:] + a[:, off:] * w[:, :-off]], dim=1)
        if 2 * off < T:  # the last step's a is never read again
            a = torch.cat([a[:, :off], a[:, off:] * a[:, :-off]], dim=1)
        off *= 2
    return w


def _selective_chunk(h0: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                     parallel: bool) -> tuple[Tensor, Tensor]:
    """One chunk of K positions of Mamba-1's selective scan, from the state ``h0`` before it:
    ``(y [batch, K, d_inner], h_K [batch, d_inner, d_state])``. The chunk's a_t, writes and
    states live only inside this call (and its recomputation in the backward pass)."""
    a = torch.exp(dt[..., None] * A)  # [batch, K, d_inner, d_state]
    w = (dt * x)[..., None] * B[:, :, None, :]  # [batch, K, d_inner, d_state]
    # carry h0 in through the first write: h_1 = a_1·h0 + w_1 is then the plain loop's step
    w = torch.cat([w[:, :1] + a[:, :1] * h0[:, None], w[:, 1:]], dim=1)
    states = (linear_scan_parallel if parallel else linear_scan_plain)(a, w)
    # a copy of the last state: a view would keep the whole chunk's states alive with it
    return torch.einsum("bkdn,bkn->bkd", states, C), states[:, -1].clone()


def selective_scan_chunked(x: Float[Tensor, "batch pos d_inner"],
                           dt: Float[Tensor, "batch pos d_inner"],
                           A: Float[Tensor, "d_inner d_state"],
                           B: Float[Tensor, "batch pos d_state"],
                           C: Float[Tensor, "batch pos d_state"],
                           chunk: int, parallel: bool = False
                           ) -> Float[Tensor, "batch pos d_inner"]:
    """y_t = h_t c_t of Mamba-1's recurrence h_t = exp(Δ_t·A) ⊙ h_{t−1} + (Δ_t x_t) ⊗ b_t,
    in chunks of ``chunk`` positions, without keeping h_t for backward.

    The plain and log-depth paths keep every [batch, pos, d_inner, d_state] tensor of a layer
    (a_t, the writes, h_t: the log-depth one once per pass) until the backward pass, which is
    what made the paper-size Mamba run out of memory. Here the forward keeps only the state at
    each chunk boundary ([batch, d_inner, d_state], one per chunk), and the backward pass
    recomputes one chunk at a time from it (``torch.utils.checkpoint``), so training memory is
    that of the inputs plus one chunk's states. Each chunk scans by the plain loop, or with
    ``parallel`` by the log-depth scan (few, large operations: for CUDA). Without gradients
    nothing is recomputed and the chunks run as they are."""
    check(chunk >= 1, f"chunk must be >= 1, got {chunk}")
    h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])  # [batch, d_inner, d_state]
    ys = []
    for lo in range(0, x.shape[1], chunk):
        part = (h, x[:, lo:lo + chunk], dt[:, lo:lo + chunk], A, B[:, lo:lo + chunk],
                C[:, lo:lo + chunk], parallel)
        if torch.is_grad_enabled():
            y, h = torch.utils.checkpoint.checkpoint(_selective_chunk, *part,
                                                     use_reentrant=False)
        else:
            y, h = _selective_chunk(*part)
        ys.append(y)  # [batch, K, d_inner]
    return torch.cat(ys, dim=1)


@functools.cache
def optional_kernel(module: str, name: str) -> Any:
    """``module.name`` from an optional CUDA package (mamba-ssm), or None. Imported on first
    use only, so nothing CUDA-specific loads with the models."""
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - not installed, or a broken CUDA / Triton build
        return None


# ---------------------------------------------------------------------------- state
@dataclass(frozen=True)
class SSMState:
    """The whole recurrent state of one selective-SSM mixer after position t: what its outputs
    at every later position depend on besides the later inputs.

    ``h`` is H_t as ``hook_ssm_state`` holds it at t; ``conv`` the causal convolution's window,
    its last w − 1 inputs (positions t − w + 2 … t of ``hook_in_proj``'s conv channels: xBC for
    Mamba-2, x for Mamba; zeros before the sequence start; width 0 without a conv). H_t alone
    is not the state: the conv outputs at t + 1 … t + w − 1 still read the window.
    :mod:`probes.ssm_patching` reads, transplants and zeroes it."""

    h: Float[Tensor, "batch heads d_head d_state"]
    conv: Float[Tensor, "batch window channels"]

    def zeroed(self) -> SSMState:
        """The state a run starts from (H_0 = 0, the window all padding)."""
        return SSMState(torch.zeros_like(self.h), torch.zeros_like(self.conv))


def causal_conv_from(conv1d: nn.Conv1d, x: Float[Tensor, "batch pos channels"],
                     window: Float[Tensor, "batch win channels"] | None
                     ) -> Float[Tensor, "batch pos channels"]:
    """The depthwise causal conv of ``x`` (left padding w − 1, the first T outputs), its window
    filled by ``window`` (the w − 1 inputs before ``x``) instead of zeros when given."""
    T = x.shape[1]
    if window is None:
        return conv1d(x.transpose(1, 2))[..., :T].transpose(1, 2)
    w = window.shape[1]
    full = torch.cat([window, x], dim=1).transpose(1, 2)  # [batch, channels, w − 1 + T]
    return conv1d(full)[..., w : w + T].transpose(1, 2)


# ---------------------------------------------------------------------------- mixer base
class SSMMixer(nn.Module):
    """The hook points every selective-SSM mixer exposes (DESIGN.md's SSM vocabulary, shared
    with TransformerLens' Mamba bridges). Shapes: Mamba-2 / Mamba (a channel of Mamba is a head
    of width one, so state analyses run on both). ``layer`` is the block's index (HF's
    ``layer_idx``), for mixers whose initialisation depends on depth."""

    @classmethod
    def axes(cls, cfg, batch: int, pos: int) -> dict[str, tuple[int, ...]]:
        """The shapes of x, B / C (``bc``), Δ_t (``dt``), a_t, the state, and the widths of the
        input projection and the conv, on a ``[batch, pos]`` input."""
        raise NotImplementedError(f"{cls.__name__}: declare its axes")

    @classmethod
    def hook_shapes(cls, cfg, batch: int, pos: int) -> Shapes:
        """Every mixer hook DESIGN.md names (``mixer.`` left off) -> its shape."""
        B, T, a = batch, pos, cls.axes(cfg, batch, pos)
        shapes = {"in_proj": (B, T, a["proj"]), "conv": (B, T, a["conv"]), "x": a["x"],
                  "B": a["bc"], "C": a["bc"], "ssm_dt": a["dt"], "decay": a["decay"],
                  "ssm_write": a["state"], "ssm_state": a["state"], "y": a["x"],
                  "ssm_out": (B, T, cfg.d_model)}
        if cfg.gated:
            shapes["gate"] = (B, T, cfg.d_inner)
        return {f"hook_{n}": s for n, s in shapes.items()}

    def __init__(self, cfg: SSMLMConfig, layer: int = 0):
        super().__init__()
        self.cfg = cfg
        self.scan = cfg.scan  # auto | plain | the mixer's fast paths (SuiteModel.set_scan)
        # an SSMState to start the next forward from instead of the zero state (None: zero);
        # set and cleared by probes.ssm_patching.start_from, which takes the plain scan
        self.start_state: SSMState | None = None
        self.hook_in_proj = HookPoint()  # [batch, pos, d_in_proj]
        self.hook_conv = HookPoint()  # [batch, pos, conv channels], before the activation
        self.hook_x = HookPoint()  # [batch, pos, heads, d_head] / [batch, pos, d_inner]
        self.hook_B = HookPoint()  # [batch, pos, groups, d_state] / [batch, pos, d_state]
        self.hook_C = HookPoint()  # [batch, pos, groups, d_state] / [batch, pos, d_state]
        self.hook_ssm_dt = HookPoint()  # Δ_t [batch, pos, heads] / [batch, pos, d_inner]
        self.hook_decay = HookPoint()  # a_t [batch, pos, heads] / [batch, pos, d_inner, d_state]
        self.hook_ssm_write = HookPoint()  # Δ_t·x_t⊗b_t [batch, pos, heads, d_head, d_state]
        self.hook_ssm_state = HookPoint()  # H_t [batch, pos, heads, d_head, d_state]
        self.hook_y = HookPoint()  # H_t c_t + D·x_t, shaped as hook_x
        self.hook_gate = HookPoint()  # act(z_t) [batch, pos, d_inner]
        self.hook_ssm_out = HookPoint()  # [batch, pos, d_model], what the block adds

    def state_hooked(self) -> bool:
        """A hook reads a_t, the writes or H_t: only the paths that materialise H_t give them."""
        return any(has_hooks(h) for h in (self.hook_decay, self.hook_ssm_write,
                                          self.hook_ssm_state))


# ---------------------------------------------------------------------------- LM
class SSMBlock(nn.Module):
    """resid_post = resid_pre + mixer(norm(resid_pre)) [+ mlp(norm2(resid_mid))] (pre-norm)."""

    hook_out_is_single_residual_stream = True  # what TL's logit lens asks (see TransformerBlock)

    def __init__(self, cfg: SSMLMConfig, mixer: nn.Module):
        super().__init__()
        self.cfg = cfg
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm)
        self.mixer = mixer
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        if cfg.d_mlp:
            self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
            self.norm2 = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm)
            self.mlp = GatedMLP(cfg.d_model, cfg.d_mlp, cfg.mlp_act)
            self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        resid = self.hook_resid_pre(resid)
        resid = resid + self.mixer(self.norm(resid))
        if self.cfg.d_mlp:
            resid = self.hook_resid_mid(resid)
            resid = resid + self.hook_mlp_out(self.mlp(self.norm2(resid)))
        return self.hook_resid_post(resid)


class SSMLanguageModel(SuiteModel):
    """Embedding -> n blocks -> final norm -> unembedding, with ``mixer_cls`` in every block.

    forward(tokens [batch, pos]) -> logits [batch, pos, vocab]. With ``prediction="l1"`` the
    unembedding's outputs are unnormalised probabilities (:meth:`readout`) and the logits their
    log (:meth:`compute_logits`).
    """

    mixer_cls: ClassVar[type[SSMMixer]] = SSMMixer

    @classmethod
    def block_hook_shapes(cls, cfg: SSMLMConfig, batch: int, pos: int) -> Shapes:
        B, T, d = batch, pos, cfg.d_model
        shapes = {f"mixer.{n}": s for n, s in cls.mixer_cls.hook_shapes(cfg, B, T).items()}
        shapes["hook_resid_post"] = (B, T, d)
        if cfg.d_mlp:
            shapes |= {"hook_resid_mid": (B, T, d), "mlp.hook_post": (B, T, cfg.d_mlp),
                       "hook_mlp_out": (B, T, d)}
        return shapes

    def __init__(self, cfg: SSMLMConfig):
        super().__init__(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([SSMBlock(cfg, self.mixer_cls(cfg, i))
                                     for i in range(cfg.n_layers)])
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.final_norm)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias)
        self._init_weights()
        self.setup()

    @torch.no_grad()
    def _init_weights(self):
        """mamba-ssm's scheme: embeddings N(0, init_std); Linear / conv keep PyTorch's default;
        out_proj / fc2 shrunk by √(residual writes per layer · n_layers) (prenorm rescale).
        The unembedding bias is 0, or ``unembed_bias_init`` (no random draw either way)."""
        cfg = self.cfg
        nn.init.normal_(self.embed.weight, std=cfg.init_std)
        nn.init.normal_(self.unembed.weight, std=cfg.init_std)
        if cfg.unembed_bias:
            nn.init.zeros_(self.unembed.bias)
        writes = 2 if cfg.d_mlp else 1
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "fc2.weight")):
                p.div_(math.sqrt(writes * cfg.n_layers))
            elif name.endswith(("in_proj.bias", "out_proj.bias")):
                nn.init.zeros_(p)
        if cfg.unembed_bias_init is not None:
            self.unembed.bias.fill_(cfg.unembed_bias_init)

    def readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """The unembedding's output: the logits of a softmax model; with ``prediction="l1"``
        MambaZero's unnormalised prediction v (p ∝ max(|v|, l1_eps), §4.1), which Thm 1's
        construction makes β + counts (what the b·c probes regress on)."""
        return super().compute_logits(tokens)

    def compute_logits(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Logits whose softmax is the prediction: the readout, or with ``prediction="l1"``
        log max(|v|, l1_eps), whose log-softmax is log(v / ‖v‖₁), MambaZero's Prediction layer
        (§4.1) — so forward is logits on every model and ``log_probs`` has one definition.

        Why |v| and not max(v, 0): both equal v wherever it is positive (Thm 1's construction
        makes it β + counts > 0), but clamping negatives kills their gradient, and a freshly
        initialised model then never leaves the uniform prediction; |·| keeps every output
        trainable."""
        v = self.readout(tokens)
        if self.cfg.prediction == "l1":
            return v.abs().clamp_min(self.cfg.l1_eps).log()
        return v


# ---------------------------------------------------------------------------- conversion
# our prefix <-> HF Mamba2ForCausalLM / MambaForCausalLM's (mixer parameters keep their names)
_HF_PREFIXES = (("blocks.", "backbone.layers."), ("ln_final.", "backbone.norm_f."),
                ("unembed.", "lm_head."))


def rename_prefixes(sd: dict[str, Tensor], prefixes) -> dict[str, Tensor]:
    """``sd`` with each key's first matching ``(old, new)`` prefix of ``prefixes`` replaced."""
    out = {}
    for k, v in sd.items():
        for old, new in prefixes:
            if k.startswith(old):
                k = new + k[len(old):]
                break
        out[k] = v
    return out


def to_hf_state_dict(sd: dict[str, Tensor], flavor: str = "hf") -> dict[str, Tensor]:
    """Our state dict -> HF ``Mamba2ForCausalLM`` / ``MambaForCausalLM`` (``flavor="hf"``) or
    mamba-ssm's ``MambaLMHeadModel`` (``"mamba_ssm"``) names. Mixer parameters keep theirs."""
    check(flavor in ("hf", "mamba_ssm"), f"flavor must be hf or mamba_ssm, got {flavor!r}")
    emb = "backbone.embeddings.weight" if flavor == "hf" else "backbone.embedding.weight"
    return rename_prefixes(sd, (("embed.weight", emb), *_HF_PREFIXES))


def from_hf_state_dict(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """HF / mamba-ssm names -> ours (inverse of :func:`to_hf_state_dict`)."""
    back = tuple((hf, ours) for ours, hf in _HF_PREFIXES)
    return rename_prefixes(sd, (("backbone.embeddings.weight", "embed.weight"),
                                ("backbone.embedding.weight", "embed.weight"), *back))
