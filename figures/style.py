"""One look for every figure of the suite (matplotlib, no display needed)."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: analyses run on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402

from seqprobe.atomic import write_atomic  # noqa: E402 - the suite's one atomic writer

DEFAULT_OUT = Path(__file__).resolve().parent / "out"

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
    "figure.dpi": 110, "savefig.dpi": 130, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "font.size": 9,
    "legend.fontsize": 8, "legend.frameon": False,
})


def new_figure(n_panels: int = 1, width_per_panel: float = 4.2, height: float = 3.3):
    """``(fig, axes)`` with ``n_panels`` side by side (axes always a list)."""
    fig, axes = plt.subplots(1, n_panels, figsize=(width_per_panel * n_panels, height),
                             squeeze=False)
    return fig, list(axes[0])


def figure_png(fig, fmt: str = "png") -> bytes:
    """The figure as PNG (or ``fmt``) bytes, closed afterwards even when drawing fails, for a
    caller that writes them atomically."""
    buf = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(buf, format=fmt)
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, or the format its suffix names) atomically: drawn in
    memory, then written under a unique temp name and renamed by seqprobe.atomic, so a failed or
    concurrent save never leaves a half-written figure at ``path``. The figure is closed either
    way."""
    path = Path(path)
    return write_atomic(path, figure_png(fig, path.suffix[1:] or "png"))
