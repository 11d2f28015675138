"""A sweep's plots are readable with many points (report.plots): every curve its own colour and
line style, the legend outside the axes, the learning curves saying which return they show. On
stand-in sweep results of the shipped 12-point grid and a 27-point one: no training."""

import itertools
import types
from pathlib import Path

import pytest
import yaml
from matplotlib.colors import to_hex
from test_report_ranking import Stand

from purejaxppo.experiments import report
from purejaxppo.experiments.report import plots

SHIPPED = Path(__file__).parent.parent / "purejaxppo" / "configs" / "sweeps" / "clip_epochs.yaml"


def grid_points(grid: dict) -> list[dict]:
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


class Curves(Stand):
    """A stand-in sweep result with what sweep_plots reads besides: each point's config."""

    def __init__(self, points, seeds=2):
        returns = [[10.0 * i + s for s in range(seeds)] for i in range(len(points))]
        super().__init__(returns, returns, points=points)
        self.configs = [types.SimpleNamespace(num_updates=4, batch_size=64)] * len(points)


def drawn_figures(monkeypatch, result) -> dict:
    """sweep_plots' learning_curves.png and clip_fraction_by_epoch.png as matplotlib Figures."""
    drawn, real = [], plots.figure_bytes

    def kept(fig, dpi):
        drawn.append(fig)
        return real(fig, dpi)

    monkeypatch.setattr(plots, "figure_bytes", kept)
    figures = {}
    for name, draw in report.sweep_plots(result, report.sweep_summary(result), list(result.points[0])):
        if name in ("learning_curves.png", "clip_fraction_by_epoch.png"):
            assert draw().startswith(b"\x89PNG")
            figures[name] = drawn.pop()
    return figures


def test_the_shipped_sweep_has_twelve_points():
    assert len(grid_points(yaml.safe_load(SHIPPED.read_text())["sweep"]["grid"])) == 12


@pytest.mark.parametrize("grid", [
    yaml.safe_load(SHIPPED.read_text())["sweep"]["grid"],  # 4 clip_eps x 3 update_epochs
    {"clip_eps": [0.1, 0.2, 0.3], "update_epochs": [1, 4, 8], "lr": [1e-4, 3e-4, 1e-3]},
], ids=["12 points", "27 points"])
def test_every_curve_has_its_own_style_and_the_legend_lies_outside_the_axes(monkeypatch, grid):
    points = grid_points(grid)
    figures = drawn_figures(monkeypatch, Curves(points))
    assert set(figures) == {"learning_curves.png", "clip_fraction_by_epoch.png"}
    for name, fig in figures.items():
        fig.canvas.draw()
        (ax,) = [a for a in fig.axes if a.get_legend() is not None]
        curves = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(curves) == len(points), name
        styles = [(to_hex(line.get_color()), line.get_linestyle()) for line in curves]
        assert len(set(styles)) == len(styles), f"{name}: curves share a colour and line style"
        legend = ax.get_legend().get_window_extent()
        for other in fig.axes:
            assert not legend.overlaps(other.get_window_extent()), f"{name}: the legend covers an axes"
        whole = fig.bbox
        assert (whole.x0 <= legend.x0 and legend.x1 <= whole.x1 and whole.y0 <= legend.y0
                and legend.y1 <= whole.y1), f"{name}: the legend is cut off"
    curves_ax = figures["learning_curves.png"].axes[0]
    faint = [line for line in curves_ax.get_lines() if line.get_label().startswith("_")]
    assert [to_hex(line.get_color()) for line in faint] == [
        to_hex(line.get_color()) for line in curves_ax.get_lines() if not line.get_label().startswith("_")]
    assert "training episode return" in curves_ax.get_legend().get_title().get_text()


def test_curve_styles_stay_distinct_for_any_number_of_curves():
    styles = [plots.curve_style(i) for i in range(200)]
    assert len({(to_hex(s["color"]), repr(s["linestyle"])) for s in styles}) == 200
    # the first ten: tab10 solid, as matplotlib's default cycle; then dashed
    assert plots.curve_style(0)["linestyle"] == "-" and plots.curve_style(10)["linestyle"] == "--"
    assert to_hex(plots.curve_style(10)["color"]) == to_hex(plots.curve_style(0)["color"])


def test_the_learning_curves_say_the_points_are_ranked_on_the_evaluation_and_its_episodes(monkeypatch):
    ax = drawn_figures(monkeypatch, Curves([{"clip_eps": 0.1}, {"clip_eps": 0.2}]))["learning_curves.png"].axes[0]
    assert ax.get_ylabel().startswith("training episode return per update")
    assert "points ranked on the eval return" in ax.get_title() and "64 per seed" in ax.get_title()
