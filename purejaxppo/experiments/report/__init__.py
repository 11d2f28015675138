"""Tables, summaries, CSV files and plots of several seeds' metrics (host side, numpy).

The numbers come from purejaxppo.experiments.stats and the clip-fraction reading from
purejaxppo.experiments.diagnosis; this package only picks metrics out of results and formats
them: pure functions returning text or bytes. purejaxppo.experiments.folder writes them.
One module per result type, over two shared ones (each imports only those below it):

    run.py     one run (several seeds of one config): summarize, summary lines, run-time warnings;
               a folder's evaluation (eval): its summary (a row per run and per point) and histogram
    sweep.py   a sweep: a row per grid point ranked on `rank_by`, markdown, CSV, heatmaps (uses run.py's counts)
    plots.py   matplotlib pieces: pyplot, curve_with_band, smoothing_legend, text_colour, finish_plot, figure_bytes
    text.py    json_text, format_mean_se, metric_rows, csv_text
"""

from purejaxppo.experiments.report.plots import (curve_with_band, figure_bytes, finish_plot, pyplot, smoothing_legend,
                                                 text_colour)
from purejaxppo.experiments.report.run import (EVAL_MODE_NAMES, SUMMARY_ROWS, evaluation_points, evaluation_rows,
                                               evaluation_summary, histogram, plot_learning_curve, run_artefacts,
                                               run_time_counts, run_time_warnings, summarize, summary_lines,
                                               summary_markdown)
from purejaxppo.experiments.report.sweep import (RANKED, heatmap_cells, heatmap_grid, kept_runs, ranked_on,
                                                 seed_notes, show_value, sweep_artefacts, sweep_markdown,
                                                 sweep_metrics_csv, sweep_plots, sweep_summary)
from purejaxppo.experiments.report.text import CLIP_CASE_NAMES, csv_text, format_mean_se, json_text, metric_rows

__all__ = ["CLIP_CASE_NAMES", "csv_text", "curve_with_band", "EVAL_MODE_NAMES", "evaluation_points",
           "evaluation_rows", "evaluation_summary", "figure_bytes", "finish_plot", "format_mean_se", "heatmap_cells", "heatmap_grid",
           "histogram", "json_text", "kept_runs", "metric_rows", "plot_learning_curve", "pyplot", "RANKED",
           "ranked_on", "run_artefacts", "run_time_counts", "run_time_warnings", "seed_notes", "show_value",
           "smoothing_legend", "summarize", "summary_lines", "summary_markdown", "SUMMARY_ROWS", "sweep_artefacts",
           "sweep_markdown", "sweep_metrics_csv", "sweep_plots", "sweep_summary", "text_colour"]
