"""Every analysis' figure is readable at the size the index page shows it (issue 47): no wider
than the page (so nothing is shrunk), no text under figures.quality.MIN_TEXT_PX there, no
title cut at the figure's edge, no legend over the data, no 0 tick on a log axis, every
reference line named in its legend, no line running outside its panel, and a caption with the
run's settings. Each figure is drawn by the analysis' own ``plot`` from a small crafted result
(tests/figure_results.py) and finished as ``write_outputs`` finishes it."""

from __future__ import annotations

import importlib
import io

import pytest
from PIL import Image

from figures import quality
from figures.style import DPI, PAGE_PX, caption_text, finish, plt
from tests import figure_results

PLOTS = {
    "copy_efficiency": ("analyses.copy_efficiency", "plot"),
    "length_generalization": ("analyses.length_generalization", "plot"),
    "state_probe": ("analyses.state_probe", "plot"),
    "mamba_decay": ("analyses.mamba_decay", "plot"),
    "bc_orthogonality": ("analyses.bc_orthogonality", "plot"),
    "markov_laplace": ("analyses.markov_laplace", "plot"),
    "ngram_heads": ("analyses.ngram_heads.plots", "plot"),
    "ngram_heads_side_by_side": ("analyses.ngram_heads.plots", "plot"),
    "ngram_heads_per_head": ("analyses.ngram_heads.plots", "plot"),
    "stu_induction": ("analyses.stu_induction", "plot"),
    "spectral_lds": ("analyses.spectral_lds", "plot"),
    "markov_ablations": ("analyses.markov_ablations", "plot"),
    "copy_efficiency_medium": ("analyses.copy_efficiency", "plot"),
    "markov_holdout": ("analyses.markov_holdout", "plot"),
    "ngram_lookup": ("analyses.ngram_lookup", "plot"),
    "memorization": ("analyses.memorization.plots", "plot"),
    "pretrained_copy": ("analyses.pretrained_copy", "plot"),
    "copy_bounds": ("analyses.copy_bounds", "plot"),
    "duplicated_ngrams": ("analyses.duplicated_ngrams", "plot"),
}


def render(case: str, caption: str = "level quick; seed 0; steps 1,500"):
    module, fn = PLOTS[case]
    result = figure_results.CASES[case]()
    fig = getattr(importlib.import_module(module), fn)(result)
    return finish(fig, caption)


@pytest.mark.parametrize("case", sorted(PLOTS))
def test_the_figure_reads_at_page_size(case):
    fig = render(case)
    try:
        assert quality.problems(fig, PAGE_PX, DPI) == []
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        width, height = Image.open(buf).size
        assert width <= PAGE_PX and height <= 1.4 * PAGE_PX
    finally:
        plt.close(fig)


def test_the_checks_find_what_they_look_for():
    """The check itself: a wide figure, tiny text, a legend over a line, a clipped title, a
    0 tick on a symlog axis, an unnamed reference line and a line below its axis are each
    found."""
    fig, axes = plt.subplots(1, 5, figsize=(20, 3))
    axes[0].plot([0, 1], [0, 1], label="data")
    axes[0].legend(loc="center", fontsize=5)
    axes[4].set_title("a very long title " * 10)
    axes[2].plot([0, 1], [0.5, 1])
    axes[2].set_yscale("symlog", linthresh=1e-3)
    axes[2].set_ylim(0, 2)
    axes[3].plot([0, 1], [-1, 1])
    axes[3].set_ylim(0, 1)
    axes[3].axhline(0.5)
    axes[4].set_xscale("log")  # under a decade and a half: minor ticks labelled, crowded
    axes[4].set_xlim(3000, 40000)
    try:
        found = "\n".join(quality.problems(fig, PAGE_PX, DPI))
    finally:
        plt.close(fig)
    for what in ("px wide", "px on the page", "legend covers", "title cut", "a 0 tick",
                 "reference lines not named", "outside the y range", "tick labels overlap"):
        assert what in found


def test_a_legend_over_the_data_is_moved_off_it():
    fig, ax = plt.subplots()
    ax.plot(range(10), [0.5] * 10, label="flat")
    ax.legend(loc="center")
    assert quality.legend_overlaps(ax)
    finish(fig)
    assert not quality.legend_overlaps(ax)
    plt.close(fig)


def test_the_caption_says_the_runs_settings():
    text = caption_text({"train": {"a": {"steps": 3000}, "b": {"steps": 1500}},
                         "n_examples": 128}, "quick", 0)
    assert text == "level quick; seed 0; steps 1,500–3,000; 128 test examples per point"
    assert "seeds 0, 1, 2" in caption_text({"seeds": [0, 1, 2], "level": "medium"})
    used = [{"name": "copy/rope", "path": "x.pt"}, {"name": "mine", "path": "y.pt"}]
    assert caption_text({"models_used": used}).endswith("models copy/rope, mine")
    fig = render("length_generalization", text)
    try:
        assert any(t.get_text().startswith("level quick") for t in fig.texts)
    finally:
        plt.close(fig)
