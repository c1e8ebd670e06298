"""Issue 55's figure defects, each pinned: memorization's caption names the run's level, not
its label level; bc_orthogonality draws single checkpoints as points, not a trajectory;
duplicated_ngrams' legend sits under the panels; legend entries drawn alike are found
(stu_induction's L = 16 and 64 were)."""

from __future__ import annotations

from analyses import bc_orthogonality, duplicated_ngrams
from figures import quality
from figures.style import caption_text, plt
from tests import figure_results


def test_the_caption_names_the_runs_level_not_the_label_level():
    assert caption_text({"level": "token", "preset": "quick", "seed": 0}) == "level quick; seed 0"
    assert caption_text({"level": "sequence"}, "medium") == "level medium"
    assert caption_text({"level": "medium"}) == "level medium"


def test_single_checkpoints_are_points_not_a_trajectory():
    result = figure_results.CASES["bc_orthogonality"]()
    by_series: dict = {}
    for r in result["models"]:
        by_series.setdefault(r["series"], r)  # one checkpoint of each model
    result["models"] = list(by_series.values())
    fig = bc_orthogonality.plot(result)
    try:
        lines = [ln for ln in fig.axes[1].get_lines() + fig.axes[2].get_lines()
                 if "(one checkpoint)" in (ln.get_label() or "")]
        assert len(lines) >= 2 and all(ln.get_linestyle() == "None" for ln in lines)
    finally:
        plt.close(fig)


def test_duplicated_ngrams_legend_is_under_the_panels():
    fig = duplicated_ngrams.plot(figure_results.CASES["duplicated_ngrams"]())
    try:
        assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert len(labels) == len(set(labels)) and "first clear drop" in labels
    finally:
        plt.close(fig)


def test_legend_entries_drawn_alike_are_found():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], "-o", color="C0", label="a")
    ax.plot([0, 1], [1, 0], "--o", color="C0", label="b")  # dashes too short to see
    ax.legend(fontsize=6)
    try:
        assert quality.legend_twins(ax) == ["a", "b"]
        ax.legend(fontsize=6, handlelength=3.2)  # long enough to show the dashes
        assert quality.legend_twins(ax) == []
    finally:
        plt.close(fig)
