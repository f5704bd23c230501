"""The report's sections across the selected films (pipeline/inspection/report.py puts them first): the
corpus (the whole output folder's dataset.json), the films side by side, and the distributions
of motion levels, caption values and drop reasons."""

from __future__ import annotations

import html
from collections import Counter

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator

from core.record import CAPTION_PENDING
from pipeline.inspection.explore import Dataset, film_ip
from pipeline.inspection.report_html import (
    NOT_AVAILABLE,
    film_anchor,
    format_duration,
    html_table,
    new_figure,
    not_available,
    plot_img,
    review_text,
)

TOP_VALUES = 12  # bars per caption histogram: the long tail is read in the notebook


def corpus_section(dataset: Dataset) -> str:
    """The whole corpus first: what a user of many films checks before any single film."""
    overview = dataset.overview
    stage_seconds = overview["stage_seconds"]
    busy = sum(stage_seconds.values()) or 1.0
    rows = [
        ("films", f"{overview['films']} ({overview['films_complete']} complete)"),
        ("IPs", ", ".join(overview["ips"]) or NOT_AVAILABLE),
        ("hours of film", f"{overview['hours_of_film']:.2f}"),
        ("clips", f"{overview['clips']} ({overview['clips_failed']} failed)"),
        (
            "usable clips",
            NOT_AVAILABLE if overview["usable_clips"] is None else overview["usable_clips"],
        ),
        ("windows dropped", ", ".join(f"{k} {v}" for k, v in overview["drops"].items()) or "none"),
        ("failed segments", overview["failed_segments"]),
        (
            "films that failed before cutting",
            "; ".join(f["error"] for f in overview["failed_films"]) or "none",
        ),
        (
            "worker seconds by stage",
            ", ".join(f"{k} {v:.1f} s ({v / busy:.0%})" for k, v in stage_seconds.items()),
        ),
    ]
    table = html_table(["", ""], rows, show_header=False)
    return f'<section id="corpus"><h2>Corpus</h2>{table}</section>'


def overview_section(dataset: Dataset) -> str:
    rows = []
    for film in dataset.films:
        manifest, drops = film.manifest, film.drops
        link = f'<a href="#{film_anchor(film)}">{html.escape(film.slug)}</a>'
        rows.append(
            (
                link,
                film_ip(film) or NOT_AVAILABLE,
                format_duration(film.summary.film.duration),
                len(manifest),
                int((manifest["status"] != "ok").sum()),
                len(drops),
                review_text(film.review_counts),
            )
        )
    table = html_table(
        ["film", "IP", "duration", "clips", "failed", "windows dropped", "manual review"],
        rows,
        escape=False,
    )
    return f'<section id="overview"><h2>Films</h2>{table}</section>'


def distributions_section(dataset: Dataset) -> str:
    scope = "all films" if len(dataset.films) > 1 else "this film"
    manifest = dataset.manifest
    parts = [
        f"<h2>Distributions ({scope})</h2>",
        "<h3>Motion scope</h3>",
        _motion_plot(manifest, _motion_levels(dataset)),
        "<h3>Captions</h3>",
        _caption_plots(manifest),
        "<h3>Drop reasons</h3>",
        _drop_plot(dataset),
    ]
    return f'<section id="distributions">{"".join(parts)}</section>'


def _motion_plot(manifest: pd.DataFrame, levels: dict | None) -> str:
    scopes = manifest["motion_scope"].dropna().astype(float)
    if scopes.empty:
        return not_available(
            "no clip has a motion_scope value yet (the motion stage has not run on these clips)"
        )
    edges = [float(e) for e in (levels or {}).get("edges", []) if np.isfinite(float(e))]
    figure = new_figure(11, 3.2)
    left, right = figure.subplots(1, 2, width_ratios=[2.2, 1])
    left.hist(scopes, bins=_scope_bins(left, scopes, edges), color="#6c8ebf")
    for edge in edges:
        left.axvline(edge, color="#d62728", linestyle="--", linewidth=1)
    _label_levels(left, edges, scopes)
    left.set_xlabel("motion scope (mean flow magnitude, px)")
    left.set_ylabel("clips")
    for ax in (left, right):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    version = (levels or {}).get("version")
    left.set_title(
        "level edges " + (f"(version {version})" if edges else NOT_AVAILABLE), fontsize=9, pad=14
    )
    counts = manifest["motion_level"].dropna().astype(int).value_counts()
    level_range = range(1, 6)
    bars = right.bar(
        [str(k) for k in level_range], [counts.get(k, 0) for k in level_range], color="#2e9e5b"
    )
    right.bar_label(bars, fontsize=8)
    right.set_xlabel("motion level")
    right.set_title(f"{len(scopes)} of {len(manifest)} clips measured", fontsize=9)
    edges_text = (
        f"Level edges, version {version}: {', '.join(f'{e:g}' for e in edges)}."
        if edges
        else "Level edges: not available (no motion_levels in summary.json "
        "and no edges file for the clips' motion_levels_version)."
    )
    return (
        plot_img(figure, "motion", "histogram of motion scope with the level edges")
        + f'<p class="note">{html.escape(edges_text)}</p>'
    )


def _scope_bins(ax, scopes: pd.Series, edges: list[float]):
    """Logarithmic bins when the scopes span more than a decade: the level edges are roughly
    geometric (1.1, 5, 12, 24 px) and a linear axis crushes the low levels. The axis is symlog,
    linear below 1 px, so still clips (scope 0) keep their bin."""
    high = max([scopes.max(), *edges])
    if high < 10:
        return 30
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
    ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500) if t <= high * 1.05]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    return np.concatenate([np.linspace(0, 1, 5, endpoint=False), np.geomspace(1, high * 1.05, 26)])


def _label_levels(ax, edges: list[float], scopes: pd.Series) -> None:
    """Write L1..L5 over the histogram, centred between the level edges that are in view."""
    if len(edges) != 4:  # five levels have four inner edges; anything else is not labelled
        return
    low, high = ax.get_xlim()
    bounds = [min(low, scopes.min())] + edges + [max(high, scopes.max())]
    for level, (start, stop) in enumerate(zip(bounds, bounds[1:]), start=1):
        start, stop = max(start, low), min(stop, high)
        if stop > start:
            geometric = ax.get_xscale() != "linear" and start >= 1
            centre = np.sqrt(start * stop) if geometric else (start + stop) / 2
            ax.text(
                centre,
                1.0,
                f"L{level}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=8,
                color="#d62728",
            )


def _caption_plots(manifest: pd.DataFrame) -> str:
    columns = {
        "subject": manifest["subject"].dropna(),
        "environment": manifest["environment"].dropna(),
        "characters": manifest["characters"].dropna().explode().dropna(),
    }
    status = Counter(manifest["caption_status"].fillna(CAPTION_PENDING))
    status_text = ", ".join(f"{k}: {v}" for k, v in sorted(status.items()))
    note = f'<p class="note">Caption status: {html.escape(status_text)}.</p>'
    if all(values.empty for values in columns.values()):
        return (
            not_available(
                "no clip has caption fields yet (the captioning pass has not run on these clips)"
            )
            + note
        )
    figure = new_figure(12, 3.6)
    for ax, (name, values) in zip(figure.subplots(1, 3), columns.items()):
        counts = Counter(values).most_common(TOP_VALUES)
        if not counts:
            ax.text(0.5, 0.5, NOT_AVAILABLE, ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        else:
            ax.barh([str(k) for k, _ in counts], [v for _, v in counts], color="#9467bd")
            ax.invert_yaxis()
        ax.set_title(name, fontsize=10)
    return plot_img(figure, "captions", "histograms of subject, environment and characters") + note


def _drop_plot(dataset: Dataset) -> str:
    counts, lost = _drop_counts(dataset)
    if counts is None:
        return not_available("no drops.parquet rows and no drop counts in summary.json")
    figure = new_figure(7, 0.45 * len(counts) + 1.0)
    ax = figure.add_subplot()
    bars = ax.barh(list(counts.index), list(counts.values), color="#ff7f0e")
    ax.bar_label(bars, fontsize=8, padding=3)
    ax.invert_yaxis()
    ax.margins(x=0.2)
    ax.set_xlabel("windows dropped")
    rows = [
        (reason, count, NOT_AVAILABLE if lost is None else f"{lost[reason]:.1f} s")
        for reason, count in counts.items()
    ]
    return plot_img(figure, "drops", "histogram of drop reasons") + html_table(
        ["reason", "windows", "film time lost"], rows
    )


def _drop_counts(dataset: Dataset) -> tuple[pd.Series | None, pd.Series | None]:
    """Windows dropped per reason, and the seconds they covered (from drops.parquet rows, else
    the counts in summary.json, which carry no durations)."""
    drops = dataset.drops
    if not drops.empty:
        lost = (drops["end_time"] - drops["start_time"]).groupby(drops["reason"]).sum()
        return drops["reason"].value_counts(), lost
    totals: Counter[str] = Counter()
    for summary in dataset.summaries.values():
        totals.update(summary.drops or {})
    return (pd.Series(dict(totals.most_common())), None) if totals else (None, None)


def _motion_levels(dataset: Dataset) -> dict | None:
    """The level edges the clips were measured against: summary.json's, else the bundled edges
    file named by the clips' motion_levels_version."""
    for summary in dataset.summaries.values():
        if summary.motion_levels:
            return summary.motion_levels
    versions = dataset.manifest["motion_levels_version"].dropna().unique()
    if len(versions) == 0:
        return None
    try:
        from stages.motion_levels import LevelsError, load_levels

        return load_levels(str(versions[0])).to_dict()
    except (ImportError, LevelsError):
        return None  # edges made elsewhere (a recalibration file not at hand): shown as missing
