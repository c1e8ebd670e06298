"""One look for every figure of the suite (matplotlib, no display needed).

Figures are read on the reproduction's index page, which shows a PNG at most
:data:`PAGE_PX` wide: a figure is laid out for that width (:func:`new_figure`: at most
:data:`MAX_COLS` panels a row, the row no wider than the page), so its text is shown at the
size it was drawn, and :func:`finish` (which every saved figure goes through) raises any text
below :data:`MIN_FONT_PT`, wraps titles wider than their panel, moves a legend off the data it
covers and adds the run's settings as a caption. tests/unit/analyses/test_figure_quality.py checks each
analysis' figure against :mod:`figures.quality`.
"""

from __future__ import annotations

import io
import math
import textwrap
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: analyses run on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from figures.quality import legend_overlaps, tick_labels_collide  # noqa: E402
from seqprobe.atomic import write_atomic  # noqa: E402 - the suite's one atomic writer
from seqprobe.cli import LEVELS as RUN_LEVELS  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "out"
# The index page (analyses.reproduce.index) is at most this wide: a wider PNG is shrunk to it,
# and its text with it.
PAGE_PX = 1100
DPI = 130  # savefig's: PAGE_PX / DPI inches fill the page
PAGE_IN = PAGE_PX / DPI
MAX_COLS = 2  # panels side by side; more go into further rows
MIN_FONT_PT = 7.0  # no text smaller, at DPI on a page shown at its own size

class Palette(dict):
    """Colours by name; a name with none listed (a new architecture, a new model label) gets a
    fixed colour of its own from its name, so adding a model needs no entry here and its
    colour is the same in every figure and every run."""

    def __missing__(self, name: str) -> str:
        extra = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
                 "#31a354", "#756bb1", "#636363")
        return extra[zlib.crc32(str(name).encode()) % len(extra)]

    def get(self, name, default=...):
        """``COLORS[name]``; with a ``default`` (None included), that for an unlisted name."""
        return self[name] if default is ... else super().get(name, default)


# One colour per architecture / positional encoding, so figures agree with each other.
COLORS = Palette({
    "nope": "#1f77b4", "alibi": "#ff7f0e", "hard_alibi": "#2ca02c", "rope": "#d62728",
    "mamba": "#9467bd", "mamba2": "#8c564b", "mambazero": "#e377c2", "lstm": "#7f7f7f",
    "stu": "#17becf", "transformer": "#bcbd22", "add_beta": "#000000",
})

plt.rcParams.update({
    "figure.dpi": 110, "savefig.dpi": DPI, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "font.size": 9,
    "legend.fontsize": 8, "legend.frameon": True, "legend.framealpha": 0.85,
    "legend.edgecolor": "none", "axes.titlesize": 9,
})


def new_figure(n_panels: int = 1, width_per_panel: float = 4.2, height: float = 3.3):
    """``(fig, axes)`` with ``n_panels`` panels (axes always a list, in reading order), at
    most :data:`MAX_COLS` a row and each row no wider than the page (:data:`PAGE_IN`): a
    panel asked wider than its share is narrowed, and its height kept in proportion."""
    cols = min(n_panels, MAX_COLS)
    rows = math.ceil(n_panels / cols)
    width = min(width_per_panel, PAGE_IN / cols)
    panel_h = height * max(width / width_per_panel, 0.85)
    fig, grid = plt.subplots(rows, cols, figsize=(width * cols, panel_h * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n_panels:]:  # an odd count leaves the last row's second slot empty
        ax.remove()
    return fig, axes[:n_panels]


def shared_legend(fig, ax, ncol: int = 3):
    """One legend for panels that show the same models: ``ax``'s entries, under the panels
    (:func:`finish` makes room for it above the caption), so no panel gives up its width or
    its data to a legend of its own."""
    handles, labels = ax.get_legend_handles_labels()
    return fig.legend(handles, labels, loc="lower center", ncol=min(ncol, len(labels)),
                      frameon=False)


def caption_text(result: dict, level: str | None = None, seed: int | None = None) -> str:
    """The run's settings, for the line under a figure: its level, the seeds and the training
    steps of the models it read, as far as the result records them (a figure copied out of its
    page still says what it shows)."""
    parts = []
    # a result's "level" is the run's level only where it names one: a memorization result
    # written before "labels_per" had its name has the label type there, and its run's
    # level under "preset"
    own = result.get("level")
    level = (own if own in RUN_LEVELS else None) or result.get("preset") or level
    if level:
        parts.append(f"level {level}")
    seeds = result.get("seeds")
    if isinstance(seeds, (list, tuple)) and seeds:
        parts.append(f"seeds {', '.join(map(str, seeds))}" if len(seeds) <= 5
                     else f"{len(seeds)} seeds")
    elif isinstance(seeds, int) and not isinstance(seeds, bool):
        parts.append(f"{seeds} seeds")
    elif isinstance(result.get("seed"), int) or seed is not None:
        parts.append(f"seed {result.get('seed', seed)}")
    steps = sorted(set(_found(result, "steps", 3)))
    if steps:
        parts.append("steps " + (f"{steps[0]:,}" if len(steps) == 1
                                 else f"{steps[0]:,}–{steps[-1]:,}"))
    n = result.get("n_examples")
    if isinstance(n, int) and not isinstance(n, bool):
        parts.append(f"{n:,} test examples per point")
    used = [m.get("name") for m in result.get("models_used") or [] if isinstance(m, dict)]
    used = [str(u) for u in used if u]
    if used:  # which models the figure shows (the analysis' record of its checkpoints)
        parts.append(("models " + ", ".join(used)) if len(used) <= 4 else f"{len(used)} models")
    return "; ".join(parts)


def _found(obj, key: str, depth: int):
    """Positive ints stored under ``key`` in ``obj`` down to ``depth`` levels of dicts/lists."""
    if depth < 0:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, int) and not isinstance(v, bool) and v > 0:
                yield v
            elif isinstance(v, (dict, list)):
                yield from _found(v, key, depth - 1)
    elif isinstance(obj, list):
        for v in obj[:64]:  # curves are long; models' entries come first
            yield from _found(v, key, depth - 1)


def _raise_small_text(fig) -> None:
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_text() and t.get_fontsize() < MIN_FONT_PT:
            t.set_fontsize(MIN_FONT_PT)


def _wrap_titles(fig) -> None:
    """A title wider than its panel is wrapped onto more lines (never cut at the page's edge)."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        title = ax.title
        text = title.get_text()
        if not text or "\n" in text:
            continue
        width = title.get_window_extent(renderer).width
        room = ax.get_window_extent(renderer).width
        if width > room:
            chars = max(12, int(len(text) * room / width))
            title.set_text(textwrap.fill(text, chars))


# where a legend may go inside its panel, tried in this order when it covers data
_INSIDE = ("upper right", "upper left", "lower right", "lower left", "center right",
           "center left", "upper center", "lower center", "center")
_UPPER = ("upper right", "upper left", "upper center")
_HEADROOM = (0.12, 0.25, 0.4, 0.6)  # shares of the y-range added above the data, in turn


def _fit_inside(ax, legend, locs=_INSIDE) -> bool:
    for loc in locs:
        legend.set_loc(loc)
        if not legend_overlaps(ax):
            return True
    return False


def _make_headroom(ax, legend) -> bool:
    """Room for the legend above the data: the y-range raised (its ticks kept to the data's
    range) until the legend fits in one of the upper corners; False, the range as it was,
    when even the largest raise leaves it over the data."""
    y0, y1 = ax.get_ylim()
    log = ax.get_yscale() == "log" and y0 > 0 and y1 > 0
    ticks = ax.get_yticks()
    for grow in _HEADROOM:
        top = (y1 * (y1 / y0) ** grow) if log else y1 + grow * (y1 - y0)
        ax.set_ylim(y0, top)
        if ax.get_yscale() in ("linear", "log"):  # no tick above the data's own range
            ax.set_yticks([t for t in ticks if min(y0, y1) * (1 - 1e-9) - 1e-12 <= t
                           <= max(y0, y1) * (1 + 1e-9) + 1e-12])
            ax.set_ylim(y0, top)
        if _fit_inside(ax, legend, _UPPER):
            return True
    if ax.get_yscale() in ("linear", "log"):
        ax.set_yticks(ticks)
    ax.set_ylim(y0, y1)
    return False


def _move_legends(fig) -> bool:
    """Each legend that covers data (:func:`figures.quality.legend_overlaps`) goes to the
    first place inside its panel where it covers none, else in two columns, else above the
    data with the y-range raised to make room, else outside the panel's right edge. True when
    one went outside (the layout must make room)."""
    outside = False
    fig.canvas.draw()  # places the legends asked to go where they fit "best"
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or legend.get_bbox_to_anchor() is not ax.bbox:
            continue  # none, or placed on purpose relative to a point of its own
        if legend._loc != 0 and not legend_overlaps(ax):
            continue
        # "best" is chosen again at every draw, so a legend is pinned where it was checked
        if _fit_inside(ax, legend):
            continue
        if len(legend.get_texts()) > 2:
            legend.set_ncols(2)
            if _fit_inside(ax, legend):
                continue
            legend.set_ncols(1)
        if _make_headroom(ax, legend):
            continue
        legend.set_loc("upper left")
        legend.set_bbox_to_anchor((1.02, 1.0), transform=ax.transAxes)
        outside = True
    return outside


def _declutter_ticks(fig) -> None:
    """A log axis spanning under two decades labels its minor ticks too; where those labels
    collide, only the decades keep theirs."""
    fig.canvas.draw()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log" and tick_labels_collide(axis):
                axis.set_minor_formatter(NullFormatter())


def finish(fig, caption: str | None = None):
    """Ready ``fig`` for the page: text raised to :data:`MIN_FONT_PT`, titles wrapped to their
    panels, legends moved off the data, the layout tightened, and ``caption`` (the run's
    settings, :func:`caption_text`) written under the panels."""
    _raise_small_text(fig)
    band = 0.0
    if caption:
        width_in = fig.get_figwidth()
        chars = max(40, int(width_in * 72 / (0.55 * MIN_FONT_PT + 0.5)))
        caption = textwrap.fill(caption, chars)
        lines = caption.count("\n") + 1
        band = min(0.3, (lines * 1.35 * (MIN_FONT_PT + 1) / 72 + 0.08) / fig.get_figheight())
    if fig.legends:  # shared legends (shared_legend): under the panels, above the caption
        renderer = fig.canvas.get_renderer()
        below = band
        for legend in fig.legends:
            legend.set_bbox_to_anchor((0.5, below), transform=fig.transFigure)
            below += legend.get_window_extent(renderer).height / fig.bbox.height + 0.01
        band = below
    fig.tight_layout(rect=(0, band, 1, 1))
    _wrap_titles(fig)
    fig.tight_layout(rect=(0, band, 1, 1))
    _declutter_ticks(fig)
    for _ in range(3):  # a legend moved outside narrows its row: the others are checked again
        if not _move_legends(fig):
            break
        fig.tight_layout(rect=(0, band, 1, 1))
    if caption:
        fig.text(0.01, 0.02 / fig.get_figheight(), caption, ha="left", va="bottom",
                 fontsize=MIN_FONT_PT + 1, color="#444444")
    return fig


def figure_png(fig, fmt: str = "png", caption: str | None = None) -> bytes:
    """The figure as PNG (or ``fmt``) bytes after :func:`finish`, closed afterwards even when
    drawing fails, for a caller that writes them atomically."""
    buf = io.BytesIO()
    try:
        finish(fig, caption)
        fig.savefig(buf, format=fmt)
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_figure(fig, path: str | Path, caption: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (PNG, or the format its suffix names) atomically: drawn in
    memory, then written under a unique temp name and renamed by seqprobe.atomic, so a failed or
    concurrent save never leaves a half-written figure at ``path``. The figure is closed either
    way."""
    path = Path(path)
    return write_atomic(path, figure_png(fig, path.suffix[1:] or "png", caption))
