"""The class report's plots, drawn with matplotlib into PNG bytes the page embeds (no file beside it, no script).

Drawn on a bare Figure (no pyplot: no global state, no display), without the PNG's "Software" stamp, so the
same figures give the same bytes and a re-run rewrites nothing.
"""
from __future__ import annotations

import base64
import io
from collections.abc import Sequence

from grader.results import Status

# One colour per status, as the feedback pages tone them (green passed, red wrong, orange limits, grey unwritten).
STATUS_COLOURS = {
    Status.PASSED: "#1a7f37", Status.FAILED: "#cf222e", Status.ERROR: "#8c1d18", Status.TIMEOUT: "#bc4c00",
    Status.MEMORY: "#e16f24", Status.CRASHED: "#6639ba", Status.TAMPERED: "#000000",
    Status.NOT_IMPLEMENTED: "#afb8c1", Status.MISSING: "#d0d7de", Status.INVALID: "#8c959f",
}


def prepare() -> None:
    """Import what drawing needs now (a third of a second), while the run waits for its kernel template, rather
    than in the class report at the end, when nothing else runs."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _fit(fig, ax, *, legend_rows: int = 0) -> None:
    """Margins that hold the tick labels, the axis labels and `legend_rows` rows of legend above the axes, measured
    from their text. Constrained layout finds them by drawing the figure twice: that second drawing was half the
    class report's cost, paid at the end of every grading run while nothing else runs."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    pt = fig.dpi / 72  # pixels per point

    def extent(text: str, fontsize) -> tuple[float, float]:
        width, height, _ = renderer.get_text_width_height_descent(text, FontProperties(size=fontsize), ismath=False)
        return width, height

    def tick_labels(axis) -> list[str]:
        set_by_hand = [t.get_text() for t in axis.get_ticklabels()]
        if any(set_by_hand):
            return set_by_hand
        low, high = sorted(axis.get_view_interval())
        return axis.get_major_formatter().format_ticks([v for v in axis.get_majorticklocs() if low <= v <= high])

    def label(axis) -> float:  # an axis label's height and its gap to the tick labels
        text = axis.get_label_text()
        return extent(text, axis.label.get_fontsize())[1] + axis.labelpad * pt if text else 0.0

    tick = (rcParams["xtick.major.size"] + rcParams["xtick.major.pad"]) * pt
    ys, xs = tick_labels(ax.yaxis), tick_labels(ax.xaxis)
    left = max((extent(t, rcParams["ytick.labelsize"])[0] for t in ys), default=0.0) + tick + label(ax.yaxis) + 6
    bottom = extent("0", rcParams["xtick.labelsize"])[1] + tick + label(ax.xaxis) + 6
    right = extent(xs[-1], rcParams["xtick.labelsize"])[0] / 2 + 6 if xs else 6
    top = legend_rows * 2 * extent("Ag", "small")[1] + 6 if legend_rows else 8
    width, height = fig.get_size_inches() * fig.dpi
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _plain(text: str) -> str:
    """A label matplotlib draws as written (a `$` would start mathtext)."""
    return text.replace("$", r"\$")


def data_uri(png: bytes) -> str:
    """The PNG as a data: URI for an <img> (the page stays one file)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def score_histogram(edges: Sequence[float], counts: Sequence[int], chapter: str) -> bytes:
    """Students per score band of one chapter: x in points, y in students."""
    fig = _figure(6.4, 2.6)
    ax = fig.add_subplot()
    widths = [b - a for a, b in zip(edges, edges[1:])]
    ax.bar(edges[:-1], counts, width=widths, align="edge", color="#0969da", edgecolor="white")
    ax.set_xlim(edges[0], edges[-1] if edges[-1] > edges[0] else 1)
    ax.set_xlabel(_plain(f"{chapter} score (points, out of {edges[-1]:g})"))
    ax.set_ylabel("students")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.spines[["top", "right"]].set_visible(False)
    _fit(fig, ax)
    return _png(fig)


def status_mix(exercises: Sequence[str], mixes: Sequence[dict[str, int]]) -> bytes:
    """Each exercise's statuses as a bar of 100% of the students, one bar per exercise, largest problems visible."""
    fig = _figure(6.4, 0.9 + 0.32 * len(exercises))
    ax = fig.add_subplot()
    y = list(range(len(exercises)))[::-1]
    left = [0.0] * len(exercises)
    shown = []
    for status, colour in STATUS_COLOURS.items():
        shares = [100 * m.get(status.value, 0) / max(1, sum(m.values())) for m in mixes]
        if not any(shares):
            continue
        ax.barh(y, shares, left=left, color=colour, height=0.7, label=status.value)
        left = [a + b for a, b in zip(left, shares)]
        shown.append(status.value)
    ax.set_yticks(y, [_plain(e) for e in exercises])
    ax.set_xlim(0, 100)
    ax.set_xlabel("students (% of the class)")
    ax.spines[["top", "right"]].set_visible(False)
    if shown:
        # Centred on the figure, not on the axes, which long exercise names push to the right.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, 1.0), bbox_transform=fig.transFigure,
                  ncols=min(len(shown), 5), fontsize="small", frameon=False)
    _fit(fig, ax, legend_rows=-(-len(shown) // 5))
    return _png(fig)
