"""The report's scores (stages/scoring/scores.py; docs/scores.md): a line per score in each film's facts,
a figure per score across the films, and what a score's reject reason means. Every declared
score shows, with no edit here."""

from __future__ import annotations

import html
from collections import Counter

import pandas as pd

from core.vocabulary import REJECT_REASONS
from pipeline.inspection.report_html import new_figure, not_available, plot_img
from stages.base import registered_scores
from stages.scoring.scores import Score


def score_facts(manifest: pd.DataFrame) -> list[tuple[str, str]]:
    """(name, summary) of each score over a film's clips: a number score's median and range, a
    label score's clips per label."""
    return [
        (score.label.capitalize(), summarize(score, _values(manifest, score)))
        for score in registered_scores()
    ]


def summarize(score: Score, values: pd.Series) -> str:
    if values.empty:
        return "not measured"
    if score.is_number:
        numbers = values.astype(float)
        return (
            f"median {numbers.median():.3g} (range {numbers.min():.3g}-{numbers.max():.3g}, "
            f"{len(numbers)} clips)"
        )
    counts = Counter(values)
    return ", ".join(f"{label} {counts[label]}" for label in score.labels if counts[label])


def reason_meaning(reason: str) -> str:
    """What a reject reason means: the vocabulary's, or the score's whose threshold gives it."""
    if reason in REJECT_REASONS:
        return REJECT_REASONS[reason]
    meanings = {score.reject_reason: score.meaning for score in registered_scores()}
    return meanings.get(reason, "")


def score_plots(manifest: pd.DataFrame) -> str:
    """One figure per score across the films: a histogram of a number score, clips per label of
    a label score."""
    scores = [s for s in registered_scores() if not _values(manifest, s).empty]
    if not scores:
        return not_available("no clip has a score yet (cut before the score stages existed)")
    figure = new_figure(4.2 * len(scores), 3.2)
    axes = figure.subplots(1, len(scores), squeeze=False)[0]
    for ax, score in zip(axes, scores):
        values = _values(manifest, score)
        if score.is_number:
            ax.hist(values.astype(float), bins=20, color="#2ca02c")
            ax.set_xlabel(f"{score.label} ({score.unit})" if score.unit else score.label)
            ax.set_ylabel("clips")
        else:
            counts = Counter(values)
            labels = [label for label in score.labels if counts[label]]
            ax.barh(labels, [counts[label] for label in labels], color="#17becf")
            ax.invert_yaxis()
            ax.set_xlabel("clips")
        ax.set_title(score.label, fontsize=10)
    names = ", ".join(html.escape(s.label) for s in scores)
    return plot_img(figure, "scores", f"distributions of {names}")


def _values(manifest: pd.DataFrame, score: Score) -> pd.Series:
    if score.column not in manifest.columns:
        return pd.Series([], dtype=object)
    return manifest[score.column].dropna()
