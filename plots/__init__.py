"""matplotlib figures drawn from result data (simulated or measured), never live objects.

Every function returns a :class:`matplotlib.figure.Figure` (pyplot is never used, so importing
this package picks no backend); :func:`plots.style.save` writes it as PNG or SVG. Saved
results are read, and checked against their schema, by :mod:`pipesim.export.saved`.
"""

from plots.bubble_figures import bubble_figure
from plots.memory_figures import memory_timeline_figure, peak_memory_figure
from plots.paper import paper_vs_simulated_figure
from plots.speedup import speedup_figure, throughput_figure
from plots.style import EmptyPlotError, save
from plots.timeline import bars_from_timeline, side_by_side_figure, timeline_figure
from plots.validation_figures import predicted_vs_measured_figure

__all__ = [
    "EmptyPlotError",
    "bars_from_timeline",
    "bubble_figure",
    "memory_timeline_figure",
    "paper_vs_simulated_figure",
    "peak_memory_figure",
    "predicted_vs_measured_figure",
    "save",
    "side_by_side_figure",
    "speedup_figure",
    "throughput_figure",
    "timeline_figure",
]
