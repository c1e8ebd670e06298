"""Plotting style shared by all analyses; generated figures go to figures/out/ (git-ignored)."""

from figures.style import DEFAULT_OUT, new_figure, save_figure

__all__ = ["DEFAULT_OUT", "new_figure", "save_figure"]
