"""Shared look of pipesim figures: colours per action kind and per series, units, how
out-of-memory runs are drawn, and saving to PNG or SVG.

Figures are plain :class:`matplotlib.figure.Figure` objects, never pyplot's: nothing here picks
a backend or keeps figures in global state. The output format (its suffix) picks the canvas
when a figure is saved, so importing :mod:`plots` has no side effect on matplotlib.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.cbook import is_math_text
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure

from application.outputs import output_path, write_with
from pipesim.errors import PipesimError

KIND_COLOURS = {
    "F": "#4c72b0",  # forward
    "B": "#55a868",  # full backward
    "I": "#dd8452",  # input-gradient backward
    "W": "#8172b3",  # weight-gradient backward
    "opt": "#8c8c8c",  # optimizer step
}
KIND_NAMES = {
    "F": "forward (F)",
    "B": "backward (B)",
    "I": "input gradient (I)",
    "W": "weight gradient (W)",
    "opt": "optimizer",
}
FORMATS = (".png", ".svg")
DPI = 150
_MARKERS = "osD^v<>pPX*h"
# How an out-of-memory configuration is drawn: a hollow marker on lines, a hatched bar.
OOM_MARKER_FACE = "white"
OOM_HATCH = "////"
OOM_COLOUR = "#c44e52"
CLOSED_FORM_COLOUR = "black"


class EmptyPlotError(PipesimError):
    """A figure that would show nothing (a quantity that is zero everywhere): refused with the
    reason, so no one pastes a flat line into a paper."""


def series_style(index: int) -> dict[str, str]:
    """A colour and a marker for the ``index``-th series, distinct over 20 series (tab20
    colours, alternating dark and light, with a marker each so print and colour-blind readers
    can tell them apart)."""
    colourmap = matplotlib.colormaps["tab20"]
    colour = colourmap(((2 * index) % 20 + (index // 10) % 2) / 19.999)
    return {"color": to_hex(colour), "marker": _MARKERS[index % len(_MARKERS)]}


def darker(colour: str, amount: float = 0.45) -> str:
    """``colour`` mixed with black by ``amount``: a closed form drawn over its own data line
    stays visible where the two coincide."""
    red, green, blue = to_rgb(colour)
    return to_hex((red * (1 - amount), green * (1 - amount), blue * (1 - amount)))


def lighter(colour: str, depth: float) -> tuple[float, float, float]:
    """``colour`` mixed with white, from none (``depth`` 0: the first chunk) to 60% (``depth``
    1: the last), so the chunks of an interleaved or V schedule tell apart as in the papers'
    figures."""
    mix = 0.6 * depth
    red, green, blue = to_rgb(colour)
    return (red + (1 - red) * mix, green + (1 - green) * mix, blue + (1 - blue) * mix)


def text_colour(fill: Any) -> str:
    """Black or white, whichever contrasts more with ``fill`` (WCAG relative luminance)."""

    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = to_rgb(fill)
    luminance = 0.2126 * channel(red) + 0.7152 * channel(green) + 0.0722 * channel(blue)
    # Contrast with black (L+0.05)/0.05 against with white 1.05/(L+0.05): equal at L ~ 0.179.
    return "black" if luminance > 0.179 else "white"


def byte_unit(largest_bytes: float) -> tuple[float, str]:
    """The binary unit that shows ``largest_bytes`` as a number from 1 to 1024: its size in
    bytes and its name, so a memory axis never reads 0.000001 GiB."""
    for size, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest_bytes >= size:
            return float(size), name
    return 1.0, "bytes"


def time_unit(largest_s: float) -> tuple[float, str]:
    """A factor from seconds and the unit's name, so times read as 0.01..1000."""
    if largest_s >= 10:
        return 1.0, "s"
    if largest_s >= 1e-2:
        return 1e3, "ms"
    return 1e6, "µs"


def kind_of(label: str) -> str:
    """``2F0`` -> ``F``; ``opt`` stays ``opt``."""
    if label == "opt":
        return "opt"
    for character in label:
        if character in "FBIW":
            return character
    return "opt"


def new_figure(width: float, height: float) -> tuple[Figure, Any]:
    """A figure with one axes."""
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots()


def subplots(nrows: int = 1, ncols: int = 1, **options: Any) -> tuple[Figure, Any]:
    """pyplot's ``subplots`` without pyplot: ``figsize`` and ``gridspec_kw`` go to the figure
    and the grid, the rest (``sharex``, ``squeeze``, ...) to :meth:`Figure.subplots`; the
    layout is always constrained."""
    options.pop("constrained_layout", None)
    figure = Figure(figsize=options.pop("figsize", None), layout="constrained")
    return figure, figure.subplots(nrows, ncols, **options)


def check_text(text: str, field: str) -> str:
    """``text`` as matplotlib will draw it: a text with an even number of unescaped ``$`` is
    mathtext, and one matplotlib cannot parse is refused here in one line (it would otherwise
    end the drawing in a 60-line parser traceback). Returns ``text``."""
    if is_math_text(text):
        from matplotlib.font_manager import FontProperties
        from matplotlib.mathtext import MathTextParser

        try:
            MathTextParser("path").parse(text, 72, FontProperties())
        except ValueError as error:
            raise PipesimError(f"{field} {_mathtext_problem(error)}") from None
    return text


def _mathtext_problem(error: ValueError) -> str:
    """The parser's own reason, on one line: its last line, without the parser's class name."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    reason = lines[-1].split(": ", 1)[-1] if lines else str(error)
    return (
        f"is not valid mathtext ({reason[:200]}): write \\$ for a dollar sign, or fix the "
        "expression between the $ signs"
    )


def save(figure: Any, path: str | Path, *, field: str = "figure file", dpi: int = DPI) -> Path:
    """Write ``figure`` as PNG or SVG (by suffix); refuses other suffixes. ``field`` names the
    option the path came from in errors."""
    try:
        target = figure_path(path, field)
        kind = target.suffix.lower().lstrip(".")
        # Atomically, by application.outputs' rules: a full disk is an OutputError (exit 1) that
        # leaves any previous figure whole; symlinks and special files are written through.
        try:
            write_with(
                target,
                lambda handle: figure.savefig(handle, format=kind, dpi=dpi, bbox_inches="tight"),
                field=field,
            )
        except ValueError as error:
            # A text drawn from a file (a saved run's title, a schedule's name) that is mathtext
            # matplotlib cannot parse; the figure's own texts are checked before they are set.
            if "Parse" not in str(error):
                raise
            raise PipesimError(f"a text of the figure {_mathtext_problem(error)}") from None
    finally:
        _release(figure)
    return target


def _release(figure: Any) -> None:
    """Close a figure that pyplot manages (one drawn by code outside this package); our own
    figures are plain objects that the garbage collector frees."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and getattr(figure.canvas, "manager", None) is not None:
        pyplot.close(figure)


def figure_path(path: str | Path, field: str = "figure file") -> Path:
    """``path`` checked as a figure to write (.png or .svg, in an existing directory), so a
    command can refuse a bad one before it computes anything."""
    return output_path(path, field, FORMATS)
