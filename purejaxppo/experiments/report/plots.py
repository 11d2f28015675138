"""Matplotlib pieces every report's plots share (matplotlib is imported only when a plot is
drawn): the pyplot module, each curve's own colour and line style, a learning curve with its
band, the legend of a smoothed plot, a text colour readable on a cell, finishing a figure
(its legend outside the axes) and its PNG bytes."""

from __future__ import annotations

import io
import math

from purejaxppo.experiments import stats

LINE_STYLES = ("-", "--", ":", "-.")  # then a dash and 2, 3, ... dots (`curve_style`)
LEGEND_ROWS = 20  # a legend of more curves takes another column


def curve_style(i: int) -> dict:
    """The colour and line style of a figure's curve number `i` (from 0), no two the same for
    any number of curves: tab10's ten colours in turn within a line style, then the next line
    style (solid, dashed, dotted, dash-dot, then a dash followed by 2, 3, ... dots)."""
    colours = pyplot().get_cmap("tab10").colors
    style, colour = divmod(i, len(colours))
    if style < len(LINE_STYLES):
        return {"color": colours[colour], "linestyle": LINE_STYLES[style]}
    dots = style - len(LINE_STYLES) + 2
    return {"color": colours[colour], "linestyle": (0, (6.0, 1.6) + (1.0, 1.6) * dots)}


def labelled_lines(ax) -> list:
    """The curves of `ax` that the legend shows (a label not starting with "_"), in drawing order."""
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def curve_with_band(ax, steps, curves, label, window, **style):
    """Learning curves `curves` ([seeds, points]) at `steps`: the raw mean over seeds, faint,
    and over it in full colour their mean smoothed (stats.centred_mean_over_steps: a centred
    window `window` steps wide, so the curve does not lag the raw mean) with a ± 1
    standard-error band of the smoothed values over seeds (2+ seeds). The curve is the axes'
    next one: its colour and line style are `curve_style` of the curves already drawn (what
    `finish_plot` gives it), its raw mean and band its colour."""
    raw, _ = stats.mean_se_by_step(curves)
    mean, se = stats.mean_se_by_step(stats.centred_mean_over_steps(steps, curves, window))
    (line,) = ax.plot(steps, mean, label=label, **{**curve_style(len(labelled_lines(ax))), **style})
    ax.plot(steps, raw, lw=0.6, alpha=0.3, color=line.get_color())
    if se is not None:
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())


def smoothing_legend(window: float) -> str:
    """The legend title of a smoothed learning-curve plot (`curve_with_band`): which return it
    shows, what is faint, what is smoothed, and how."""
    return (f"training episode return per update\nsmoothed: centred mean over {window:,.0f} env steps\n"
            "(faint: the raw mean per update)")


def finish_plot(fig, ax, legend_size=None, legend_title=None, **labels) -> bytes:
    """The PNG of `fig` once `ax` has its `labels` (ax.set: xlabel=, ylabel=, title=), a grid, its
    curves (`labelled_lines`) each its own `curve_style` in drawing order, and their legend right
    of the axes, top-aligned, in a column per LEGEND_ROWS curves: the figure is widened by the
    legend's width (and heightened to its height) so the axes keep their size and nothing is cut."""
    ax.set(**labels)
    ax.grid(alpha=0.3)
    curves = labelled_lines(ax)
    for i, line in enumerate(curves):
        line.set(**curve_style(i))
    legend = ax.legend(fontsize=legend_size, ncol=max(1, math.ceil(len(curves) / LEGEND_ROWS)), title=legend_title,
                       title_fontsize=legend_size, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    box = legend.get_window_extent(fig.canvas.get_renderer())
    fig.set_size_inches(fig.get_figwidth() + box.width / fig.dpi + 0.2,
                        max(fig.get_figheight(), box.height / fig.dpi + 1.0))
    fig.tight_layout()
    return figure_bytes(fig, 120)


def relative_luminance(rgba) -> float:
    """The relative luminance (WCAG 2) of a colour given as RGB(A) in [0, 1]: 0 black, 1 white."""
    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(float(c)) for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_colour(rgba) -> str:
    """"black" or "white", whichever contrasts more with a cell of colour `rgba` (WCAG 2's
    contrast ratio (L1 + 0.05) / (L2 + 0.05)): black on a cell whose luminance is above
    sqrt(1.05 · 0.05) - 0.05 ≈ 0.18, white below, so every cell of any colour map stays readable."""
    luminance = relative_luminance(rgba)
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(fig, dpi: int) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    return buffer.getvalue()
