"""Figures drawn from a run summary: the story of one run, a grid of runs, the layer x step heatmap.

One drawing serves the live callbacks (a card logged where a run's story changes, the full figure saved as PNG in
the run folder at the end), the report over a folder of runs, and offline analysis: each takes a summary in the shape
of ``capgeo_summary.json`` (docs/design.md, "Summary"). Drawn with matplotlib's Agg canvas, without
pyplot, so nothing global changes and nothing opens a window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capgeo_callbacks.keys import RANKME, layer_names
from capgeo_callbacks.publish.text import first_warnings

__all__ = ["figure_pixels", "plot_grid", "plot_run", "rankme_heatmap", "story_card", "story_figure"]

_DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def new_figure(width: float, height: float, dpi: int) -> Any:
    """A matplotlib Figure on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def figure_pixels(figure: Any) -> np.ndarray:
    """The figure as an RGB image (H, W, 3) uint8."""
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _series(summary: Mapping[str, Any], tag: str | None) -> tuple[list[float], list[float]]:
    points = [p for p in ((summary.get("series") or {}).get(tag) or []) if p[1] is not None
              and math.isfinite(float(p[1]))]
    return [float(p[0]) for p in points], [float(p[1]) for p in points]


def _logprob_tag(summary: Mapping[str, Any]) -> str | None:
    return next((tag for tag in summary.get("series") or {} if tag.endswith("logprob")), None)


def _layer_colours(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return {name: cmap(0.85 * i / max(1, len(names) - 1)) for i, name in enumerate(names)}


def _at(steps: Sequence[float], values: Sequence[float], step: float) -> tuple[float, float]:
    i = min(range(len(steps)), key=lambda k: abs(steps[k] - step))
    return steps[i], values[i]


def draw_run(axis: Any, summary: Mapping[str, Any], *, markers: bool, linewidth: float,
             twin: Any = None) -> tuple[Any, list[Any]]:
    """RankMe per layer on ``axis`` (log y), accuracy and the answer's probability on ``twin`` (0 to 1), the
    step axis logarithmic past step 1 (step 0 included), acquisition and alerts as vertical lines; with
    ``markers``, each layer's collapse (v) and recovery (^) on its curve. Returns (twin, legend handles)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    names = layer_names(summary)
    colours = _layer_colours(names)
    handles: list[Any] = []
    positive = True
    for name in names:
        steps, values = _series(summary, f"{RANKME}{name}")
        if not steps:
            continue
        positive &= min(values) > 0
        (line,) = axis.plot(steps, values, color=colours[name], linewidth=linewidth, label=f"RankMe {name}")
        handles.append(line)
        info = (summary.get("layers") or {}).get(name) or {}
        for key, shape in (("collapse_step", "v"), ("recovery_step", "^")) if markers else ():
            if info.get(key) is not None:
                x, y = _at(steps, values, info[key])
                axis.plot([x], [y], marker=shape, markersize=9, color=colours[name], markeredgecolor="black",
                          linestyle="none")
    axis.set_xscale("symlog", linthresh=1.0, linscale=0.3)
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    if handles and positive:
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}" if
                                                     f"{value:g}"[0] in "235" else ""))
    twin = axis.twinx() if twin is None else twin
    steps, acc = _series(summary, "acc")
    if steps:
        (line,) = twin.plot(steps, acc, color="black", linewidth=linewidth + 0.8,
                            label=f"accuracy ({summary.get('monitor', 'val/acc')})")
        handles.append(line)
    steps, logprob = _series(summary, _logprob_tag(summary))
    if steps:
        (line,) = twin.plot(steps, [math.exp(v) for v in logprob], color="black", linestyle=":",
                            linewidth=linewidth, label="answer token probability, exp(mean log-prob)")
        handles.append(line)
    twin.set_ylim(-0.03, 1.03)
    acquisition = summary.get("acquisition_step")
    if acquisition is not None:
        handles.append(axis.axvline(acquisition, color="red", linestyle="--", linewidth=1.4,
                                    label=f"acquisition (step {acquisition})"))
    first = first_warnings(summary)
    styles = ("-.", ":", (0, (5, 1, 1, 1, 1, 1)))
    colours = ("darkorange", "tab:blue", "tab:purple")
    for i, (rule, step) in enumerate(first.items()):
        label = f"{rule} alert (step {step})"
        handles.append(axis.axvline(step, color=colours[i % 3], linestyle=styles[i % 3], linewidth=1.4,
                                    label=label))
    if markers and any(((summary.get("layers") or {}).get(n) or {}).get("collapse_step") is not None for n in names):
        handles += [Line2D([], [], marker="v", color="grey", markeredgecolor="black", linestyle="none",
                           markersize=8, label="collapse (per layer)"),
                    Line2D([], [], marker="^", color="grey", markeredgecolor="black", linestyle="none",
                           markersize=8, label="recovery (per layer)")]
    return twin, handles


def run_title(name: str, summary: Mapping[str, Any]) -> str:
    parameters = summary.get("parameters")
    head = (f"{name}: {_text(summary.get('task'))} / {_text(summary.get('difficulty'))}, "
            f"size {_text(summary.get('size'))}")
    if isinstance(parameters, int):
        head += f" ({parameters:,} parameters)"
    return (f"{head}\nverdict {_text(summary.get('verdict'))}, gap {_text(summary.get('gap'))} steps, "
            f"acquisition step {_text(summary.get('acquisition_step'))}")


def story_figure(summary: Mapping[str, Any], title: str = "", dpi: int = 100) -> Any:
    """One run's story on one plot: RankMe per layer (left, log), accuracy and the answer's probability
    (right, 0 to 1) against a logarithmic step axis, with collapse, recovery, alert and acquisition marked."""
    figure = new_figure(10, 5, dpi)
    axis = figure.add_subplot()
    twin, handles = draw_run(axis, summary, markers=True, linewidth=1.8)
    axis.set_xlabel("training step (log scale past step 1)")
    axis.set_ylabel("RankMe" + (" (log scale)" if axis.get_yscale() == "log" else ""))
    twin.set_ylabel("accuracy / answer probability")
    axis.set_title(title or run_title(str(summary.get("task", "run")), summary), fontsize=10)
    axis.grid(True, which="major", alpha=0.3)
    if handles:
        axis.legend(handles=handles, loc="center left", bbox_to_anchor=(1.1, 0.5), fontsize=8, frameon=False)
    figure.subplots_adjust(left=0.07, right=0.64, top=0.88, bottom=0.11)  # fixed: tight_layout costs a render
    return figure


def story_card(summary: Mapping[str, Any]) -> Any:
    """The story at the size TensorBoard shows an image card (about 400 x 260 pixels) with text still readable
    there: the same curves and markers, a one-line title, a small legend inside the plot."""
    from matplotlib import rc_context

    with rc_context({"font.size": 7, "axes.titlesize": 8, "xtick.labelsize": 6, "ytick.labelsize": 6}):
        figure = new_figure(4.2, 2.7, 100)
        axis = figure.add_subplot()
        twin, handles = draw_run(axis, summary, markers=True, linewidth=1.2)
        gap = summary.get("gap")
        axis.set_title(f"{_text(summary.get('task'))} {_text(summary.get('difficulty'))}: "
                       f"{_text(summary.get('verdict'))}" + (f", gap {gap} steps" if gap is not None else ""))
        axis.set_xlabel("step (log)", labelpad=1)
        axis.set_ylabel("RankMe", labelpad=1)
        twin.set_ylabel("accuracy", labelpad=1)
        short = [h for h in handles if not h.get_label().startswith(("collapse", "recovery"))]
        for handle in short:
            label = handle.get_label()
            handle.set_label(label.split(",")[0].split(" (")[0].replace("answer token probability", "p(answer)"))
        axis.legend(handles=short, loc="upper left", fontsize=5, frameon=True, framealpha=0.7, handlelength=1.5)
        figure.subplots_adjust(left=0.12, right=0.88, top=0.9, bottom=0.15)
    return figure


def plot_run(name: str, summary: Mapping[str, Any], path: str | Path, dpi: int = 110) -> Path:
    """:func:`story_figure` of one run, saved as PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    story_figure(summary, run_title(name, summary), dpi).savefig(path)
    return path


def plot_grid(runs: Sequence[tuple[str, Mapping[str, Any]]], path: str | Path, dpi: int = 80) -> Path:
    """Every run on one figure: rows are tasks, columns difficulty / size; a cell overlays its seeds."""

    def column_key(s: Mapping[str, Any]) -> tuple[Any, ...]:
        difficulty = str(s.get("difficulty"))
        parameters = s.get("parameters")
        return (_DIFFICULTY_ORDER.get(difficulty, 9), difficulty,
                parameters if isinstance(parameters, (int, float)) else math.inf, str(s.get("size")))

    tasks = list(dict.fromkeys(str(s.get("task", "—")) for _, s in runs))
    columns = sorted({column_key(s) for _, s in runs})
    cells: dict[tuple[str, tuple[Any, ...]], list[Mapping[str, Any]]] = {}
    for _, summary in runs:
        cells.setdefault((str(summary.get("task", "—")), column_key(summary)), []).append(summary)
    nrows, ncols = max(1, len(tasks)), max(1, len(columns))
    height = 2.6 * nrows + 1.2
    figure = new_figure(max(7.0, 3.2 * ncols + 0.8), height, dpi)
    axes = figure.subplots(nrows, ncols, squeeze=False)
    for i, task in enumerate(tasks):
        for j, column in enumerate(columns):
            axis = axes[i][j]
            summaries = cells.get((task, column), [])
            label = f"{column[1]} / {column[3]}"
            if not summaries:
                axis.set_axis_off()
                axis.text(0.5, 0.5, f"{task}\n{label}\nno run", ha="center", va="center", fontsize=8, color="grey")
                continue
            twin = None
            for summary in summaries:
                twin, _ = draw_run(axis, summary, markers=False, linewidth=1.0, twin=twin)
            twin.tick_params(labelsize=7, labelright=j == ncols - 1)
            verdicts = ", ".join(sorted({_text(s.get("verdict")) for s in summaries}))
            seeds = f", {len(summaries)} seeds" if len(summaries) > 1 else ""
            axis.set_title(f"{task}: {label}{seeds}\n{verdicts}", fontsize=8)
            axis.tick_params(labelsize=7)
            if j == 0:
                axis.set_ylabel("RankMe", fontsize=8)
            if i == nrows - 1:
                axis.set_xlabel("step (log)", fontsize=8)
    figure.suptitle("RankMe per layer (colour: shallow to deep, log scale); accuracy (black) and answer "
                    "probability (dotted), right axis 0-1;\nacquisition (red dashed), each rule's first warning",
                    fontsize=10)
    figure.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.7 / height))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path


def rankme_heatmap(series: Mapping[str, Sequence[Sequence[float]]], acquisition_step: int | None = None,
                   collapse_steps: Mapping[str, int | None] | None = None) -> np.ndarray:
    """A layer x evaluation heatmap of RankMe as an RGB image (H, W, 3) uint8.

    Rows are layers (deepest at the top), columns evaluations in order (so the dense early evaluations get
    their share of the width); each row is normalised to its own peak so every layer's collapse is visible
    whatever its scale. Acquisition is a dashed line, each layer's collapse a white dot.
    """
    from matplotlib import rc_context

    layers = [name for name, points in series.items() if points]
    steps = sorted({int(p[0]) for name in layers for p in series[name]})
    with rc_context({"font.size": 6, "axes.titlesize": 7}):  # card-sized, as loggers show images
        return _heatmap(series, layers, steps, acquisition_step, collapse_steps)


def _heatmap(series: Mapping[str, Sequence[Sequence[float]]], layers: list[str], steps: list[int],
             acquisition_step: int | None, collapse_steps: Mapping[str, int | None] | None) -> np.ndarray:
    figure = new_figure(4.2, 0.9 + 0.3 * max(1, len(layers)), 100)
    axis = figure.add_subplot()
    if layers and steps:
        index = {step: i for i, step in enumerate(steps)}
        grid = np.full((len(layers), len(steps)), np.nan)
        for row, name in enumerate(layers):
            for step, value in series[name]:
                grid[row, index[int(step)]] = value
            peak = np.nanmax(grid[row])
            if peak > 0:
                grid[row] /= peak
        image = axis.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest",
                            origin="lower", extent=(-0.5, len(steps) - 0.5, -0.5, len(layers) - 0.5))
        axis.set_yticks(range(len(layers)), layers)
        ticks = sorted({round(k) for k in np.linspace(0, len(steps) - 1, 6)})
        axis.set_xticks(ticks, [str(steps[k]) for k in ticks])
        axis.set_xlabel("step (one column per evaluation)")
        figure.colorbar(image, ax=axis, label="RankMe / layer peak", pad=0.01)

        def column(step: int) -> float:
            return float(np.searchsorted(steps, step))

        if acquisition_step is not None:
            axis.axvline(column(acquisition_step), color="red", linestyle="--", linewidth=1.5, label="acquisition")
            axis.legend(loc="upper left", fontsize=5, framealpha=0.6)
        for row, name in enumerate(layers):
            step = (collapse_steps or {}).get(name)
            if step is not None:
                axis.plot([column(step)], [row], "o", color="white", markersize=4, markeredgecolor="black")
    axis.set_title("RankMe / layer peak (deepest at top); o collapse, dashed acquisition")
    figure.tight_layout()
    return figure_pixels(figure)
