"""figures.save_figure writes atomically: a figure that fails to draw leaves no file at all,
and one that replaces an earlier PNG leaves that PNG whole (no partial PNG, no temp file)."""

import matplotlib.figure
import pytest

from figures.style import new_figure, plt, save_figure


def failing_figure():
    """A figure whose savefig writes half a PNG into its target, then fails."""
    fig, _ = new_figure()

    def savefig(fname, **kw):
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG\r\n\x1a\n half")
        else:  # a path: what an in-place savefig writes to
            with open(fname, "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n half")
        raise OSError("disk full")

    fig.savefig = savefig
    return fig


def test_a_failing_savefig_leaves_no_partial_png(tmp_path):
    fig = failing_figure()
    with pytest.raises(OSError, match="disk full"):
        save_figure(fig, tmp_path / "a.png")
    assert list(tmp_path.iterdir()) == []
    assert fig.number not in plt.get_fignums()  # closed all the same (other tests' may be open)


def test_a_failing_savefig_keeps_the_previous_png(tmp_path):
    fig, (ax,) = new_figure()
    ax.plot([0, 1])
    path = save_figure(fig, tmp_path / "a.png")
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG") and len(before) > 1000
    with pytest.raises(OSError):
        save_figure(failing_figure(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]


def test_the_suffix_picks_the_format(tmp_path):
    fig, _ = new_figure()
    assert isinstance(fig, matplotlib.figure.Figure)
    assert save_figure(fig, tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")
