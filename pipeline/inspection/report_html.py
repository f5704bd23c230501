"""The report's page and how it shows values: tables, figures as embedded PNGs, numbers, sizes
and durations, the contents, the page itself and its style. No script, no external resource."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipeline import __version__
from pipeline.inspection.explore import Dataset, Film

NOT_AVAILABLE = "not available"


def format_value(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return NOT_AVAILABLE
    return str(value)


def format_number(value, pattern: str):
    return pattern.format(value) if isinstance(value, (int, float)) else None


def format_size(width, height):
    return f"{width}x{height}" if width and height else None


def format_duration(seconds):
    if not isinstance(seconds, (int, float)):
        return None
    minutes, rest = divmod(float(seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}:{minutes:02d}:{rest:05.2f} ({seconds:.2f} s)"


def review_text(counts: dict[str, int]) -> str:
    """`3 of 120 clips reviewed: 2 accepted, 1 rejected, 1 corrected` (and stale decisions)."""
    text = (
        f"{counts['reviewed']} of {counts['clips']} clips reviewed: {counts['accepted']} "
        f"accepted, {counts['rejected']} rejected, {counts['corrected']} corrected"
    )
    if counts["stale"]:
        text += f" ({counts['stale']} decisions name clips no longer in the film)"
    return text


def film_anchor(film: Film) -> str:
    return f"film-{anchor_slug(film.slug)}"


def anchor_slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def not_available(reason: str) -> str:
    return f'<p class="na">Not available: {html.escape(reason)}.</p>'


def html_table(
    header: list[str], rows: list[tuple], show_header: bool = True, escape: bool = True
) -> str:
    cell = (lambda v: html.escape(str(v))) if escape else str
    head = (
        "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
        if show_header
        else ""
    )
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def plot_img(figure, name: str, alt: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return (
        f'<img class="plot" data-plot="{name}" alt="{html.escape(alt)}" '
        f'src="{data_uri(buffer.getvalue(), "image/png")}">'
    )


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def table_of_contents(dataset: Dataset) -> str:
    links = (
        ['<a href="#corpus">Corpus</a>', '<a href="#overview">Films</a>']
        if len(dataset.films) > 1
        else []
    )
    links += [f'<a href="#{film_anchor(f)}">{html.escape(f.slug)}</a>' for f in dataset.films]
    links.append('<a href="#distributions">Distributions</a>')
    return " &middot; ".join(links)


def html_page(title: str, contents: str, body: str) -> str:
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Dataset report: {html.escape(title)}</title>
<style>{_STYLE}</style></head>
<body><header><h1>Dataset report: {html.escape(title)}</h1>
<p class="note">Generated {generated} by animegamer {__version__}. Every image below was rendered
from the clip shards (and the source film, for the crop box).</p>
<nav>{contents}</nav></header>
{body}
</body></html>
"""


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1d1d1f;
       margin: 0 auto; max-width: 1320px; padding: 0 20px 40px; }
h1 { font-size: 24px; }
h2 { border-bottom: 2px solid #ddd; padding-top: 16px; }
h2 small { color: #888; font-weight: normal; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #eee; padding: 3px 10px; text-align: left; vertical-align: top; }
.note { color: #555; }
.swatch { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 10px;
  vertical-align: middle; border-radius: 2px; }
.measures b { color: #8a1f11; }
.na { color: #a15c00; background: #fff6e5; padding: 6px 10px; border-radius: 4px;
      display: inline-block; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 14px; }
figure.clip { margin: 0; background: #f6f6f8; border-radius: 6px; padding: 6px; font-size: 12px; }
figure.clip img { display: block; max-width: 100%; height: auto; border-radius: 3px; }
img.plot { display: block; max-width: 100%; height: auto; margin: 6px 0; }
q { font-style: italic; }
pre { background: #f6f6f8; padding: 10px; overflow: auto; }
"""
