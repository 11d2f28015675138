"""Matplotlib pieces every report's plots share (matplotlib is imported only when a plot is
drawn): the pyplot module, a learning curve with its band, the legend of a smoothed plot,
a text colour readable on a cell, finishing a figure and its PNG bytes."""

from __future__ import annotations

import io

from purejaxppo.experiments import stats


def curve_with_band(ax, steps, curves, label, window, **style):
    """Learning curves `curves` ([seeds, points]) at `steps`: the raw mean over seeds, faint,
    and over it in full colour their mean smoothed (stats.centred_mean_over_steps: a centred
    window `window` steps wide, so the curve does not lag the raw mean) with a ± 1
    standard-error band of the smoothed values over seeds (2+ seeds)."""
    raw, _ = stats.mean_se_by_step(curves)
    mean, se = stats.mean_se_by_step(stats.centred_mean_over_steps(steps, curves, window))
    (line,) = ax.plot(steps, mean, label=label, **style)
    ax.plot(steps, raw, lw=0.6, alpha=0.3, color=line.get_color())
    if se is not None:
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())


def smoothing_legend(window: float) -> str:
    """The legend title of a smoothed plot: what is faint, what is smoothed, and how."""
    return f"smoothed: centred mean over {window:,.0f} env steps\n(faint: the raw mean per update)"


def finish_plot(fig, ax, legend_size=None, legend_title=None, **labels) -> bytes:
    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, ncol=2 if legend_size else 1, title=legend_title,
              title_fontsize=legend_size)
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
