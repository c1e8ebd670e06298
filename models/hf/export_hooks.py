"""Our hook names at the modules of an exported HuggingFace model (:mod:`models.hf.export`):
:data:`HOOK_MAP` per exported class, :func:`hook_sites` with the block index filled in. A
forward hook on the module (or nnsight's ``.output`` / ``.input``) reads what our hook reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from seqprobe.config import check

BAMBA = "BambaForCausalLM"  # a Mamba-2 with our MLP after each mixer (no attention layer)


@dataclass(frozen=True)
class HFSite:
    """Where one of our hooks is in the exported HF model: the module at ``module`` (``{i}``:
    our block index, the same index in HF's layer list), read as its ``output`` (element
    ``item`` of a tuple) or its first positional ``input``. Values equal ours to float
    rounding, reshaped to HF's shape (our per-head axes are flattened there); ``note`` says
    where they are not."""

    module: str
    read: str = "output"  # output | input
    item: int = 0
    note: str = ""


_NEOX = "gpt_neox.layers.{i}."
_SSM = "backbone.layers.{i}."
_BAMBA_L = "model.layers.{i}."
LN_SHIFT_NOTE = ("plus seqprobe.ln_final_shift of config.json where the unembedding bias was "
                 "moved into this LayerNorm's bias (GPT-NeoX's lm_head has none)")
def _ssm_sites(root: str, embed: str, layer: str, norm: str, mixer: str, final_norm: str,
               more: dict[str, HFSite]) -> dict[str, HFSite]:
    """The hooks every exported SSM class has (embedding, residual stream, block norm, the
    mixer's in_proj and output, final norm) at its module names under ``root``, and ``more``."""
    block = f"{root}.{layer}"
    return {"hook_embed": HFSite(f"{root}.{embed}"),
            "blocks.{i}.hook_resid_pre": HFSite(block, "input"),
            "blocks.{i}.norm.hook_out": HFSite(f"{block}.{norm}"),
            "blocks.{i}.mixer.hook_in_proj": HFSite(f"{block}.{mixer}.in_proj"),
            "blocks.{i}.mixer.hook_ssm_out": HFSite(f"{block}.{mixer}"),
            "blocks.{i}.hook_resid_post": HFSite(block),
            "ln_final.hook_out": HFSite(f"{root}.{final_norm}"),
            **more}


# our hook name -> HF module, per exported class (forward hooks on the module, or nnsight's
# .output / .input, read these). A norm module's output is our hook_out (after the affine, the
# TL bridge's name too); hook_normalized is before the affine, as TransformerLens has it, and
# has no module boundary. Activations with no module boundary of their own in the HF
# class (q, k, v, scores, Δ_t, B, C, the state) are not listed.
HOOK_MAP: dict[str, dict[str, HFSite]] = {
    "GPTNeoXForCausalLM": {
        "hook_embed": HFSite("gpt_neox.embed_in"),
        "blocks.{i}.hook_resid_pre": HFSite("gpt_neox.layers.{i}", "input"),
        "blocks.{i}.ln1.hook_out": HFSite(_NEOX + "input_layernorm"),
        "blocks.{i}.attn.hook_pattern": HFSite(_NEOX + "attention", item=1,
                                               note="eager attention only (others give None)"),
        "blocks.{i}.attn.hook_z": HFSite(_NEOX + "attention.dense", "input"),
        "blocks.{i}.hook_attn_out": HFSite(_NEOX + "attention"),
        # sequential blocks: the second LayerNorm reads resid_mid (parallel ones: resid_pre)
        "blocks.{i}.hook_resid_mid": HFSite(_NEOX + "post_attention_layernorm", "input"),
        "blocks.{i}.ln2.hook_out": HFSite(_NEOX + "post_attention_layernorm"),
        "blocks.{i}.mlp.hook_pre": HFSite(_NEOX + "mlp.dense_h_to_4h"),
        "blocks.{i}.mlp.hook_post": HFSite(_NEOX + "mlp.dense_4h_to_h", "input"),
        "blocks.{i}.hook_mlp_out": HFSite(_NEOX + "mlp"),
        "blocks.{i}.hook_resid_post": HFSite("gpt_neox.layers.{i}"),
        "ln_final.hook_out": HFSite("gpt_neox.final_layer_norm", note=LN_SHIFT_NOTE),
    },
    "Mamba2ForCausalLM": _ssm_sites(
        "backbone", "embeddings", "layers.{i}", "norm", "mixer", "norm_f",
        {"blocks.{i}.mixer.hook_y": HFSite(_SSM + "mixer.norm", "input")}),
    BAMBA: _ssm_sites(
        "model", "embed_tokens", "layers.{i}", "input_layernorm", "mamba", "final_layernorm",
        {"blocks.{i}.mixer.hook_y": HFSite(_BAMBA_L + "mamba.norm", "input"),
         "blocks.{i}.hook_resid_mid": HFSite(_BAMBA_L + "pre_ff_layernorm", "input"),
         "blocks.{i}.norm2.hook_out": HFSite(_BAMBA_L + "pre_ff_layernorm"),
         "blocks.{i}.mlp.hook_post": HFSite(_BAMBA_L + "feed_forward.down_proj", "input"),
         "blocks.{i}.hook_mlp_out": HFSite(_BAMBA_L + "feed_forward")}),
    "MambaForCausalLM": _ssm_sites(
        "backbone", "embeddings", "layers.{i}", "norm", "mixer", "norm_f",
        {"blocks.{i}.mixer.hook_x": HFSite(_SSM + "mixer.x_proj", "input")}),
}


def hook_sites(hf_class_name: str, n_layers: int) -> dict[str, HFSite]:
    """:data:`HOOK_MAP` of one exported class with ``{i}`` filled in for every block:
    ``{"blocks.0.hook_resid_post": HFSite("gpt_neox.layers.0"), ...}``."""
    check(hf_class_name in HOOK_MAP, f"no hook map for {hf_class_name!r}; exported classes: "
          f"{', '.join(sorted(HOOK_MAP))}")
    sites = {}
    for ours, site in HOOK_MAP[hf_class_name].items():
        for i in range(n_layers) if "{i}" in ours else [None]:
            sites[ours.format(i=i)] = (site if i is None else dataclasses.replace(
                site, module=site.module.format(i=i)))
    return sites
