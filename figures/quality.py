"""What makes a figure readable on the page, as checks (tests/unit/analyses/test_figure_quality.py runs them
on every analysis' figure; :func:`figures.style.finish` moves legends by
:func:`legend_overlaps`). Each check returns the problems it finds, one line each, so a failing
test says which panel and what to change.

Data artists are those drawn in data coordinates: lines (their points and the segments between
them), scatter markers and bars. Reference lines (``axhline``/``axvline``: drawn in axes
coordinates along one axis) are not data, but each must be named in its panel's legend.
"""

from __future__ import annotations

import matplotlib.colors
import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text

MIN_TEXT_PX = 12  # the smallest text on the page, in pixels (7 pt at 130 dpi)
_SAMPLES = 24  # points per segment when a line is tested against a legend's box


def _renderer(fig):
    return fig.canvas.get_renderer()


def _is_reference(line, ax) -> bool:
    """An axhline/axvline: in axes coordinates along one of its directions."""
    t = line.get_transform()
    return isinstance(line, Line2D) and t in (ax.get_xaxis_transform(), ax.get_yaxis_transform())


def _line_points(line, ax) -> np.ndarray:
    """Display-space points along a data line, its segments sampled (a legend over the middle
    of a segment covers it as much as one over a marker)."""
    xy = np.asarray(line.get_xydata(), dtype=float)
    xy = xy[np.isfinite(xy).all(axis=1)] if xy.ndim == 2 else np.empty((0, 2))
    if not len(xy):
        return np.empty((0, 2))
    pts = ax.transData.transform(xy)
    if line.get_linestyle() in ("None", "", " ") or len(pts) == 1:
        return pts
    t = np.linspace(0, 1, _SAMPLES)[:, None, None]
    seg = pts[:-1][None] * (1 - t) + pts[1:][None] * t
    return seg.reshape(-1, 2)


def data_boxes(ax) -> tuple[np.ndarray, list]:
    """``(points, boxes)``: display-space points of the panel's lines and markers, and the
    display boxes of its bars and of the texts written on them."""
    pts = [_line_points(line, ax) for line in ax.get_lines()
           if line.get_visible() and not _is_reference(line, ax)
           and line.get_transform().contains_branch(ax.transData)]
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            offs = np.asarray(coll.get_offsets(), dtype=float)
            if offs.size:
                offs = offs[np.isfinite(offs).all(axis=1)]
                pts.append(coll.get_offset_transform().transform(offs))
    boxes = [p.get_window_extent() for p in ax.patches
             if isinstance(p, Rectangle) and p.get_visible() and p.get_height() != 0
             and p.get_transform().contains_branch(ax.transData)]
    # numbers written on the data (bar_label's values, annotations) are read with it
    r = _renderer(ax.figure)
    boxes += [t.get_window_extent(r) for t in ax.texts if t.get_visible() and t.get_text()]
    points = np.concatenate(pts) if pts else np.empty((0, 2))
    return points, boxes


def legend_overlaps(ax, pad: float = 3.0) -> int:
    """How many data points and bars of ``ax`` its legend's box, widened by ``pad`` pixels,
    covers (0: none)."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return 0
    fig = ax.figure
    ax.get_xlim(), ax.get_ylim()  # autoscaled limits, as a draw would set them
    box = legend.get_window_extent(_renderer(fig)).padded(pad)
    points, boxes = data_boxes(ax)
    axes_box = ax.get_window_extent()
    inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & \
        (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1) if len(points) else np.array([])
    # only what is drawn: points outside the panel are clipped away
    shown = ((points[:, 0] >= axes_box.x0) & (points[:, 0] <= axes_box.x1)
             & (points[:, 1] >= axes_box.y0) & (points[:, 1] <= axes_box.y1)) \
        if len(points) else np.array([])
    n = int((inside & shown).sum()) if len(points) else 0
    return n + sum(1 for b in boxes if b.overlaps(box)) + legend_sticks_out(ax)


MIN_DASH_HANDLE_PT = 16  # a legend handle shorter than this shows no full dash and gap


def _look(handle, show_dashes: bool) -> tuple | None:
    """What tells a legend's line entry apart: colour, marker and its fill, and the line style
    where the handle is long enough to show it (a short dashed stub under a marker reads as
    a solid one)."""
    if not isinstance(handle, Line2D):
        return None
    style = str(handle.get_linestyle())
    if not show_dashes and style in ("--", "-."):
        style = "-"  # long dashes need a long handle; dots (":") show in a short one
    return (matplotlib.colors.to_hex(handle.get_color()), style, str(handle.get_marker()),
            str(matplotlib.colors.to_hex(handle.get_markerfacecolor())
                if handle.get_markerfacecolor() not in (None, "none", "None") else "none"))


def legend_twins(ax) -> list[str]:
    """The labels of ``ax``'s legend whose line entries look the same (colour, line style,
    marker, marker fill): two curves a reader cannot tell apart by the legend."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return []
    seen: dict = {}
    twins: list[str] = []
    texts = legend.get_texts()
    size = texts[0].get_fontsize() if texts else 10.0
    show_dashes = legend.handlelength * size >= MIN_DASH_HANDLE_PT
    for handle, text in zip(legend.legend_handles, texts, strict=False):
        look = _look(handle, show_dashes)
        if look is None:
            continue
        if look in seen:
            twins += [seen[look], text.get_text()]
        seen.setdefault(look, text.get_text())
    return list(dict.fromkeys(twins))


def legend_sticks_out(ax) -> int:
    """1 when a legend placed inside its panel is wider or taller than the panel (it then
    covers the tick labels and the axis label), else 0; one placed outside on purpose (its
    own anchor) is not counted."""
    legend = ax.get_legend()
    if legend is None or legend.get_bbox_to_anchor() is not ax.bbox:
        return 0
    box = legend.get_window_extent(_renderer(ax.figure))
    a = ax.get_window_extent()
    return int(box.x0 < a.x0 - 2 or box.x1 > a.x1 + 2 or box.y0 < a.y0 - 2 or box.y1 > a.y1 + 2)


def problems(fig, page_px: int, dpi: float) -> list[str]:
    """Every problem of ``fig`` as saved at ``dpi`` and shown at most ``page_px`` wide."""
    fig.canvas.draw()
    r = _renderer(fig)
    out = []
    width_px = fig.get_figwidth() * dpi
    shrink = min(1.0, page_px / width_px)
    if width_px > page_px + 1:
        out.append(f"{width_px:.0f} px wide: shrunk to {page_px} px on the page")
    fig_box = fig.bbox
    small = sorted((t.get_fontsize() * dpi / 72 * shrink, t.get_text()[:30])
                   for t in fig.findobj(Text) if t.get_text() and t.get_visible()
                   and t.get_fontsize() * dpi / 72 * shrink < MIN_TEXT_PX - 0.01)
    if small:
        out.append(f"{len(small)} texts under {MIN_TEXT_PX} px on the page, the smallest "
                   f"{small[0][1]!r} at {small[0][0]:.1f} px")
    titles = [ax.title.get_window_extent(r) for ax in fig.axes if ax.title.get_text()]
    if any(a.overlaps(b) for i, a in enumerate(titles) for b in titles[i + 1:]):
        out.append("two panels' titles overlap")
    for i, ax in enumerate(fig.axes):
        where = f"panel {i} ({ax.get_title()[:40]!r})"
        title = ax.title
        if title.get_text():
            tb = title.get_window_extent(r)
            if tb.x0 < fig_box.x0 - 1 or tb.x1 > fig_box.x1 + 1 or tb.y1 > fig_box.y1 + 1:
                out.append(f"{where}: title cut at the figure's edge")
        for label, size, room in ((ax.xaxis.label, "width", "width"),
                                  (ax.yaxis.label, "height", "height")):
            if label.get_text() and getattr(label.get_window_extent(r), size) > \
                    1.1 * getattr(ax.get_window_extent(r), room) + 2:
                out.append(f"{where}: axis label {label.get_text()[:30]!r} is longer than "
                           "its axis")
        n = legend_overlaps(ax)
        if n:
            out.append(f"{where}: legend covers {n} data points/bars")
        twins = legend_twins(ax)
        if twins:
            out.append(f"{where}: legend entries {twins} are drawn alike")
        out += [f"{where}: {p}" for p in _axis_problems(ax)]
    return out


def tick_labels_collide(axis) -> bool:
    """Whether two shown tick labels of ``axis`` (major and minor) overlap."""
    r = _renderer(axis.figure)
    lo, hi = sorted(axis.get_view_interval())
    boxes = [t.label1.get_window_extent(r) for t in (*axis.get_major_ticks(),
                                                      *axis.get_minor_ticks())
             if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi
             and not t.label1.get_rotation()]  # a rotated label's box is not its ink
    boxes.sort(key=lambda b: (b.x0, b.y0))
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:i + 4])


def _axis_problems(ax) -> list[str]:
    out = []
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        if tick_labels_collide(axis):
            out.append(f"the {name} axis' tick labels overlap")
    for name, axis, lim in (("x", ax.xaxis, ax.get_xlim()), ("y", ax.yaxis, ax.get_ylim())):
        if axis.get_scale() in ("log", "symlog"):
            lo, hi = min(lim), max(lim)
            ticks = [v for v in axis.get_ticklocs() if lo <= v <= hi]
            if any(v == 0 for v in ticks):
                out.append(f"a 0 tick on the {name} axis' {axis.get_scale()} scale")
    legends = [ax.get_legend(), *ax.figure.legends]
    named = {t.get_text() for lg in legends if lg is not None for t in lg.get_texts()}
    refs = [ln for ln in ax.get_lines() if _is_reference(ln, ax) and ln.get_visible()]
    # a line in the style of one the legend names (a second switch token, another model's
    # baseline in its own colour) is named by it
    styles = {ln.get_linestyle() for ln in refs if ln.get_label() in named}
    unnamed = [ln for ln in refs if ln.get_linestyle() not in styles]
    if unnamed:
        out.append(f"{len(unnamed)} reference lines not named in the legend")
    x0, x1 = sorted(ax.get_xlim())
    y0, y1 = sorted(ax.get_ylim())
    for line in ax.get_lines():
        if _is_reference(line, ax) or not line.get_visible():
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.ndim != 2 or not len(xy):
            continue
        xy = xy[np.isfinite(xy).all(axis=1)]
        if ax.get_yscale() == "log":  # a 0 is not drawn on a log axis, by design
            xy = xy[xy[:, 1] > 0]
        tol_y = 1e-6 * max(1.0, abs(y1 - y0))
        off = ((xy[:, 1] < y0 - tol_y) | (xy[:, 1] > y1 + tol_y)) & \
            (xy[:, 0] >= x0) & (xy[:, 0] <= x1)
        if off.any():
            out.append(f"line {line.get_label()[:30]!r} has {int(off.sum())} points outside "
                       "the y range")
    return out
