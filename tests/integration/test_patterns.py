"""Attention patterns to look at (issue 55, probes/patterns.py, analyses/patterns.py): one
call draws every layer × head as a grid titled L{layer}H{head} with the tokens as labels, SSMs
through their effective attention by the same call; the interactive page is self-contained
without circuitsvis; the command writes both files under --out; bad input is one line."""

from __future__ import annotations

import json
import re

import pytest
import torch

from analyses import patterns as command
from probes.patterns import draw_patterns, patterns_html, read_patterns

TEXT = "abca<COPY>ab"


@pytest.fixture
def copier(tiny_model):
    model = tiny_model("transformer", random=True, pe="hard_alibi", vocab_size=13)
    model.set_task("copy", {"D": 9, "max_len": 5})
    return model.eval()


def labels(ticks) -> list[str]:
    return [t.get_text() for t in ticks]


def test_the_grid_is_layers_by_heads_with_token_labels(copier):
    fig = draw_patterns(copier, TEXT)
    L, H = copier.cfg.n_layers, copier.cfg.n_heads
    assert len(fig.axes) == L * H
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [f"L{layer}H{head}" for layer in range(L) for head in range(H)]
    tokens = copier.to_str_tokens(TEXT)
    assert tokens[0] == "<BOS>" and len(tokens) == 1 + len("abca") + 1 + 2
    bottom_left = fig.axes[(L - 1) * H]
    assert labels(bottom_left.get_xticklabels()) == tokens  # keys across, on the last row
    assert labels(fig.axes[0].get_yticklabels()) == tokens  # queries down, on the first column
    assert set(labels(fig.axes[1].get_yticklabels())) == {""}
    # the image is the pattern itself: rows sum to one, the Hard-ALiBi window-1 head is diagonal
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (len(tokens), len(tokens))
    assert abs(image.sum(axis=1) - 1).max() < 1e-5 and abs(image.diagonal() - 1).max() < 1e-5


def test_ssms_are_drawn_through_their_effective_attention(tiny_model):
    model = tiny_model("mamba2", random=True, vocab_size=13)
    model.set_task("copy", {"D": 9, "max_len": 5})
    fig = draw_patterns(model.eval(), TEXT, heads=[1])
    assert [ax.get_title() for ax in fig.axes] == [f"L{i}H1" for i in range(model.cfg.n_layers)]
    assert "effective attention" in fig._suptitle.get_text()
    seen = read_patterns(model, TEXT)
    assert torch.allclose(seen.per_layer[0].sum(-1), torch.ones(1), atol=1e-5)


def test_the_page_is_self_contained_and_holds_the_patterns(copier):
    page = patterns_html(copier, TEXT)
    assert "<script src" not in page and "http" not in page
    data = json.loads(re.search(r"const D = (\{.*?\});\n", page).group(1))
    assert data["tokens"] == copier.to_str_tokens(TEXT)
    assert len(data["layers"]) == copier.cfg.n_layers
    assert len(data["layers"][0]) == copier.cfg.n_heads


def test_the_command_writes_both_files_under_out(copier, tmp_path, capsys):
    ckpt = copier.save(tmp_path / "m.pt")
    assert command.main([str(ckpt), TEXT, "--out", str(tmp_path / "view")]) == 0
    assert (tmp_path / "view" / "patterns.png").stat().st_size > 1000
    assert (tmp_path / "view" / "patterns.html").exists()
    assert "wrote" in capsys.readouterr().out
    assert command.main([str(ckpt), TEXT, "--heads", "9", "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: heads must be in 0..3") and "\n" not in err


def test_a_model_without_heads_is_one_line(tiny_model):
    model = tiny_model("lstm", vocab_size=13)
    model.set_task("copy", {"D": 9, "max_len": 5})
    with pytest.raises(Exception, match="no attention heads") as e:
        draw_patterns(model, TEXT)
    assert "\n" not in str(e.value)
