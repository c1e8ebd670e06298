"""Attention patterns to look at: every layer × head of a model on one sequence, as a labelled
grid (:func:`draw_patterns`, a matplotlib figure; PNG with ``out``) and as an interactive page
(:func:`patterns_html`: circuitsvis' ``attention_patterns`` where circuitsvis is installed, a
self-contained page of the suite's own otherwise).

A transformer's heads are drawn from ``attn.hook_pattern``; a Mamba-2's heads and a Mamba's
channels through their effective attention (:func:`probes.effective_attention.head_patterns`:
each key's share of the row's |M|, so rows sum to one as a pattern's do), by the same call.
``python -m analyses.patterns MODEL TEXT`` writes both files.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from probes.effective_attention import head_patterns, kind, n_heads
from seqprobe.config import check

MAX_HEADS = 16  # heads drawn per layer by default (a Mamba has a "head" per channel)
KIND_WORDS = {"attention": "attention pattern", "ssd": "effective attention (|M| share)",
              "s6": "effective attention (|M| share)"}


@dataclass(frozen=True)
class Patterns:
    """One sequence's patterns: ``per_layer[l]`` is ``[head, q, k]`` for the drawn ``heads``;
    ``tokens`` the sequence's tokens as text (``<BOS>`` first where the task writes it)."""

    per_layer: list[Tensor]
    tokens: list[str]
    heads: list[int]
    kind: str  # attention | ssd | s6

    @property
    def n_layers(self) -> int:
        return len(self.per_layer)


def read_patterns(model, text: str | Tensor, heads: list[int] | None = None) -> Patterns:
    """The patterns of ``model`` on one sequence (text in the task's vocabulary, as
    ``model.to_tokens`` reads it, or ``[pos]`` / ``[1, pos]`` ids): every head, or the first
    :data:`MAX_HEADS` where a layer has more (a Mamba's channels), or ``heads``."""
    k = kind(model)  # one line for a model with neither attention nor effective attention
    tokens = model.to_tokens(text) if isinstance(text, str) else text
    if tokens.dim() == 1:
        tokens = tokens[None]
    check(tokens.dim() == 2 and tokens.shape[0] == 1,
          f"draw one sequence at a time: got ids of shape {tuple(tokens.shape)}")
    check(tokens.shape[1] >= 1, "the sequence is empty: nothing to draw")
    H = n_heads(model)
    heads = list(range(min(H, MAX_HEADS))) if heads is None else list(heads)
    check(bool(heads) and all(0 <= h < H for h in heads),
          f"heads must be in 0..{H - 1} (this model has {H} per layer), got {heads}")
    per_layer = [p[0, heads] for p in head_patterns(model, tokens)]  # [head, q, k] each
    symbols = model.to_str_tokens(tokens[0])
    return Patterns(per_layer, list(symbols), heads, k)


def draw_patterns(model, text: str | Tensor, heads: list[int] | None = None,
                  out: str | Path | None = None):
    """Every layer × head of ``model`` on ``text`` as a grid (rows: layers, columns: heads),
    each panel titled ``L{layer}H{head}``, queries down and keys across, labelled with the
    tokens. Returns the matplotlib figure; with ``out`` (a directory) also writes
    ``patterns.png`` and ``patterns.html`` (:func:`patterns_html`) there."""
    seen = read_patterns(model, text, heads)
    fig = grid_figure(seen)
    if out is not None:
        write_patterns(seen, fig, out)
    return fig


def grid_figure(seen: Patterns):
    """The grid of :func:`draw_patterns` for ``seen``: one square panel per layer and head."""
    from figures.style import plt  # deferred: matplotlib (headless) only when drawing

    L, H, T = seen.n_layers, len(seen.heads), len(seen.tokens)
    side = max(1.4, min(3.0, 0.16 * T + 0.6))  # inches a panel: room for T token labels
    fig, axes = plt.subplots(L, H, figsize=(side * H, side * L + 0.5), squeeze=False)
    labels = seen.tokens
    for layer, pattern in enumerate(seen.per_layer):
        for col, head in enumerate(seen.heads):
            ax = axes[layer][col]
            ax.imshow(pattern[col].numpy(), cmap="Blues", vmin=0.0, vmax=1.0,
                      interpolation="nearest")
            ax.set_title(f"L{layer}H{head}", fontsize=8)
            ax.set_xticks(range(T))
            ax.set_yticks(range(T))
            ax.set_xticklabels(labels if layer == L - 1 else [""] * T, rotation=90, fontsize=6)
            ax.set_yticklabels(labels if col == 0 else [""] * T, fontsize=6)
            ax.tick_params(length=0)
            ax.grid(False)  # the suite style's grid would cross the cells
    fig.suptitle(f"{KIND_WORDS[seen.kind]}: rows are layers, columns heads; queries down, keys "
                 "across", fontsize=9)
    return fig


def write_patterns(seen: Patterns, fig, out: str | Path) -> list[Path]:
    """``patterns.png`` and ``patterns.html`` in ``out`` (atomic writes); the paths."""
    from figures.style import save_figure
    from seqprobe.atomic import write_atomic

    out = Path(out)
    png = save_figure(fig, out / "patterns.png")
    page = write_atomic(out / "patterns.html", patterns_page(seen).encode())
    return [png, page]


def patterns_html(model, text: str | Tensor, heads: list[int] | None = None) -> str:
    """An interactive page of every layer × head of ``model`` on ``text``: circuitsvis'
    ``attention_patterns`` per layer where circuitsvis imports, else the suite's own page
    (self-contained: no network; pick a layer and head, hover a token to see where it looks)."""
    return patterns_page(read_patterns(model, text, heads))


def patterns_page(seen: Patterns) -> str:
    """The page of :func:`patterns_html` for patterns already read."""
    try:
        import circuitsvis  # noqa: F401 - optional: the suite's page stands in without it
        from circuitsvis.attention import attention_patterns
    except Exception:  # noqa: BLE001 - absent, or a release that fails to import
        return own_page(seen)
    parts = [f"<h2>Layer {layer}</h2>" + str(attention_patterns(
        tokens=seen.tokens, attention=pattern,
        attention_head_names=[f"L{layer}H{h}" for h in seen.heads]))
        for layer, pattern in enumerate(seen.per_layer)]
    return "<!DOCTYPE html><html><meta charset='utf-8'><body>" + "".join(parts) + "</body></html>"


def own_page(seen: Patterns) -> str:
    """A self-contained HTML page of ``seen``: a heatmap of the chosen head (queries down,
    keys across, the weight on hover) and the tokens, each shaded by how much the hovered
    token's query puts on it."""
    data = {"tokens": seen.tokens, "heads": seen.heads, "kind": KIND_WORDS[seen.kind],
            "layers": [[[[round(float(v), 4) for v in row] for row in head]
                        for head in pattern.to(torch.float32)] for pattern in seen.per_layer]}
    return _PAGE.replace("__DATA__", json.dumps(data)).replace(
        "__TITLE__", html.escape(f"{KIND_WORDS[seen.kind]} — {len(seen.tokens)} tokens"))


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table.h{border-collapse:collapse;margin-top:1em}
table.h td{width:18px;height:18px;padding:0;border:1px solid #f4f4f4}
table.h th{font-weight:normal;font-size:11px;padding:0 3px}
table.h thead th{writing-mode:vertical-rl;transform:rotate(180deg)}
#toks span{display:inline-block;padding:2px 4px;margin:1px;border:1px solid #ddd;cursor:default}
</style></head><body>
<h1>__TITLE__</h1>
<p>Layer <select id="layer"></select> head <select id="head"></select>
 <span id="val"></span></p>
<p id="toks"></p>
<table class="h" id="grid"></table>
<script>
const D = __DATA__;
const L = document.getElementById("layer"), H = document.getElementById("head");
D.layers.forEach((_, i) => L.add(new Option(i, i)));
D.heads.forEach((h, i) => H.add(new Option(h, i)));
function esc(s){const e=document.createElement("span");e.textContent=s;return e.innerHTML;}
function shade(v){return `rgba(31,119,180,${v})`;}
function draw(){
  const P = D.layers[L.value][H.value], T = D.tokens;
  let s = "<thead><tr><th></th>" + T.map(t => `<th>${esc(t)}</th>`).join("") + "</tr></thead>";
  P.forEach((row, q) => {
    s += `<tr><th>${esc(T[q])}</th>` + row.map((v, k) =>
      `<td style="background:${shade(v)}" title="query ${q} (${esc(T[q])}) -> key ${k} ` +
      `(${esc(T[k])}): ${v}"></td>`).join("") + "</tr>";
  });
  document.getElementById("grid").innerHTML = s;
  const box = document.getElementById("toks");
  box.innerHTML = T.map((t, i) => `<span data-i="${i}">${esc(t)}</span>`).join("");
  box.querySelectorAll("span").forEach(el => el.onmouseover = () => {
    const q = +el.dataset.i;
    box.querySelectorAll("span").forEach((o, k) => o.style.background = shade(P[q][k]));
    document.getElementById("val").textContent = `query ${q}: ${T[q]}`;
  });
}
L.onchange = draw; H.onchange = draw; draw();
</script></body></html>
"""
