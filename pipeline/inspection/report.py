"""A self-contained static HTML report of a film folder, or of several films of a dataset folder.

It answers the questions asked before GPU-days go into training: do clips start and end on the
right frames (timeline, previews with frame ranges), is the crop right (the box drawn on a source
frame next to the stored clip frame), are motion levels spread sensibly (motion-scope histogram
with the level edges), do captions name the right characters (caption histograms, instruction
under each preview), why were windows dropped (drop reasons), and where the time went (stage
timings). Columns a stage has not filled yet are reported as "not available", with the reason.

Every image is generated here from the shards (and the source film, for the crop box) and
embedded as a data URI; the page has no script and no external resource, so it opens from disk,
mailed or archived, with no server. Plots use matplotlib's object API with the Agg canvas: no
pyplot, so building a report from a notebook leaves the notebook's plotting backend alone.
"""

from __future__ import annotations

import html
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from core import storage
from core.film import FilmSummary, OverlayRecord, WindowRecord
from core.io import write_text_atomic
from pipeline.inspection.explore import (
    Dataset,
    DatasetError,
    Film,
    animated_preview,
    film_ip,
    open_dataset,
)
from pipeline.inspection.report_corpus import (
    corpus_section,
    distributions_section,
    overview_section,
)
from pipeline.inspection.report_data import (
    clip_geometry,
    crop_box,
    crop_text,
    evenly_spaced,
    film_display_name,
    first_value,
    middle_clip,
    report_title,
    source_frame_at,
    summary_drop_total,
    window_text,
)
from pipeline.inspection.report_html import (
    NOT_AVAILABLE,
    anchor_slug,
    data_uri,
    film_anchor,
    format_duration,
    format_number,
    format_size,
    format_value,
    html_page,
    html_table,
    new_figure,
    not_available,
    plot_img,
    review_text,
    table_of_contents,
)
from pipeline.inspection.report_options import ReportOptions
from pipeline.inspection.report_scores import reason_meaning, score_facts
from pipeline.passes.quality import film_thresholds
from stages.quality import RejectConfig, quality_measures

# Clips on the timeline (a rejected clip: by the quality stage or in review)
_CLIP_COLORS = {"usable": "#2e9e5b", "rejected": "#c7c7c7", "failed": "#d62728"}
# Drop reasons on the timeline: no green, grey or red, which mark the clips.
_DROP_COLORS = ["#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]


# ---------------------------------------------------------------- entry points


def write_report(
    path: str | Path, out: str | Path | None = None, options: ReportOptions | None = None
) -> str | Path:
    """Write the report of a film or dataset folder; returns the HTML file's path."""
    options = options or ReportOptions()
    dataset = select_films(open_dataset(path), options.ip)
    local = Path(out) if out else default_report_path(dataset.root, options.ip)
    write_text_atomic(build_report(dataset, options), local)
    if storage.is_remote(path) and not out:  # beside the dataset it describes, as for a folder
        remote = storage.join(path, local.name)
        storage.upload(local, remote)
        return remote
    return local


def default_report_path(root: Path, ip: str | None = None) -> Path:
    return root / (f"report-{anchor_slug(ip)}.html" if ip else "report.html")


def select_films(dataset: Dataset, ip: str | None) -> Dataset:
    if ip is None:
        return dataset
    films = [film for film in dataset.films if film_ip(film) == ip]
    if not films:
        known = sorted({film_ip(f) or NOT_AVAILABLE for f in dataset.films})
        raise DatasetError(f"{dataset.root}: no film of IP {ip!r} (IPs here: {', '.join(known)})")
    return Dataset(dataset.root, films)


def build_report(dataset: Dataset, options: ReportOptions | None = None) -> str:
    options = options or ReportOptions()
    title = report_title(dataset, options.ip)
    sections = []
    if len(dataset.films) > 1:
        sections.append(corpus_section(dataset))
        sections.append(overview_section(dataset))
    sections += [_film_section(dataset, film, options) for film in dataset.films]
    sections.append(distributions_section(dataset))
    return html_page(title, table_of_contents(dataset), "\n".join(sections))


# ---------------------------------------------------------------- one film


def _film_section(dataset: Dataset, film: Film, options: ReportOptions) -> str:
    manifest, drops = film.manifest, film.drops
    parts = [
        f"<h2>{html.escape(film_display_name(film, manifest))} "
        f"<small>{html.escape(film.slug)}</small></h2>",
        "<h3>Film</h3>",
        _facts_table(film, manifest, drops),
        "<h3>Crop box</h3>",
        _crop_figure(dataset, film, manifest),
        "<h3>Timeline</h3>",
        _timeline(film, manifest, drops),
        "<h3>Clips</h3>",
        _preview_grid(dataset, manifest, options),
        "<h3>Rejected clips</h3>",
        _rejected_clips(dataset, manifest, options, film_thresholds(film.summary)),
        "<h3>Failed clips</h3>",
        _failed_clips(manifest),
        "<h3>Stage timings</h3>",
        _timings(film.summary),
        "<h3>Configuration</h3>",
        _config(film.summary),
    ]
    return f'<section class="film" id="{film_anchor(film)}">{"".join(parts)}</section>'


def _facts_table(film: Film, manifest: pd.DataFrame, drops: pd.DataFrame) -> str:
    summary = film.summary
    facts = summary.film
    ok = manifest[manifest["status"] == "ok"]
    rows = [
        ("Film name", facts.film_name),
        ("IP", film_ip(film)),
        ("Film id", facts.film_id),
        ("Source file", facts.path),
        ("Source size", format_size(facts.width, facts.height)),
        ("Pixel shape", _pixel_shape(facts)),
        ("Source frame rate", format_number(facts.fps, "{:.3f} fps")),
        ("Variable frame rate", facts.vfr),
        ("Rotation", facts.rotation),
        ("Codec", facts.codec),
        ("Source frames", facts.num_frames),
        ("Duration", format_duration(facts.duration)),
        ("Crop box (x, y, w, h)", crop_text(summary.crop)),
        ("Clip window (x, y, w, h)", window_text(summary.window)),
        ("Overlays", summary.overlays.line() if summary.overlays is not None else None),
        ("Field structure", summary.fields.worded() if summary.fields is not None else None),
        ("Scenes", len(summary.scenes) if summary.scenes is not None else None),
        ("Clips written (summary)", summary.clips_written),
        ("Clips failed (summary)", summary.clips_failed),
        ("Clips in the manifest", f"{len(manifest)} ({len(ok)} ok)"),
        ("Usable clips (quality)", _usable_text(manifest)),
        ("Clip geometry", clip_geometry(manifest)),
        ("Upscaled", _upscaled_text(summary)),
        *score_facts(manifest),  # clarity beside the upscaling that softens it
        ("Captions (summary)", summary.captions),
        ("Windows dropped", len(drops) if len(drops) else summary_drop_total(summary)),
        ("Manual review", review_text(film.review_counts)),
        ("Folder", str(film.path)),
    ]
    return html_table(
        ["", ""], [(name, format_value(value)) for name, value in rows], show_header=False
    )


def _pixel_shape(facts) -> str | None:
    """`anamorphic 720x480 SAR 32:27, shown as 853x480`, `square`, or None where summary.json
    predates the record of the sample aspect ratio."""
    if facts.sar is None:
        return None
    return facts.shape_words() or "square"


def _upscaled_text(summary) -> str:
    """Whether the clips enlarge the source picture (summary.json `upscaled`), and how much."""
    if "upscaled" in summary.absent:
        return "not recorded"
    return summary.upscaled.note if summary.upscaled else "no"


def _crop_figure(dataset: Dataset, film: Film, manifest: pd.DataFrame) -> str:
    box = crop_box(film.summary, manifest)
    clip = middle_clip(manifest)
    if box is None or clip is None:
        return not_available("no crop box in summary.json and no clip to take one from")
    stored = dataset.first_frame(clip["clip_id"])
    source_path = film.summary.film.path
    source = source_frame_at(source_path, float(clip["start_time"])) if source_path else None
    shown = _shown_region(film.summary, box)
    label = f"clip {clip['clip_id'][:8]} at {clip['start_time']:.2f} s"
    figure = _crop_plot(
        source, stored, box, shown, label, film.summary.overlays, film.summary.window
    )
    return figure + f'<p class="note">{html.escape(_crop_note(film, box, shown, source))}</p>'


def _crop_note(film: Film, box: tuple, shown: tuple | None, source: np.ndarray | None) -> str:
    if source is None:
        path = film.summary.film.path
        where = f"at {path}" if path else "(summary.json names no source file)"
        return (
            f"The source film is not reachable {where}: shown is the stored first frame of "
            "the clip, already cropped and resized, without the box."
        )
    x, y, w, h = box
    crop = film.summary.crop
    origin = crop.source if crop and "source" not in crop.absent else "taken from the clip rows"
    note = (
        f"Left: the source frame where the clip starts, with the crop box {w}x{h} at "
        f"({x}, {y}) (solid; {origin})"
    )
    if shown and tuple(shown) != tuple(box):
        sx, sy, sw, sh = shown
        note += (
            f"; the clips show its {sw}x{sh} part at ({sx}, {sy}) (dashed: the resize mode "
            "cuts the box to the clips' aspect)"
        )
    window = film.summary.window
    if window is not None and window.line():
        note += f"; {window.line()} (dotted: where the centred window would be)"
    return note + ". Right: the clip's stored first frame."


def _crop_plot(
    source: np.ndarray | None,
    stored: np.ndarray,
    box: tuple,
    shown: tuple | None,
    label: str,
    overlays: OverlayRecord | None = None,
    window: WindowRecord | None = None,
) -> str:
    panels = [source, stored] if source is not None else [stored]
    figure = new_figure(6.0 * len(panels), 3.6)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, image in zip(axes, panels):
        ax.imshow(image)
        ax.set_xticks([]), ax.set_yticks([])
    if source is not None:
        x, y, w, h = box
        axes[0].add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="#ff2d55", linewidth=2))
        title = f"source {source.shape[1]}x{source.shape[0]}, crop {w}x{h} at ({x}, {y})"
        if shown and tuple(shown) != tuple(box):
            sx, sy, sw, sh = shown
            axes[0].add_patch(
                Rectangle(
                    (sx, sy), sw, sh, fill=False, edgecolor="#ffd60a", linewidth=2, linestyle="--"
                )
            )
            title += f"; clips show {sw}x{sh} at ({sx}, {sy})"
        if window is not None and window.moved:
            cx, cy, cw, ch = window.centred
            axes[0].add_patch(
                Rectangle((cx, cy), cw, ch, fill=False, edgecolor="#ffd60a", linestyle=":")
            )
            title += ", moved"
        if overlays is not None:
            _draw_overlays(axes[0], overlays, box)
        axes[0].set_title(title, fontsize=9)
    axes[-1].set_title(f"stored {stored.shape[1]}x{stored.shape[0]}, {label}", fontsize=9)
    return plot_img(figure, "crop", "crop box drawn on a source frame")


def _draw_overlays(ax, overlays: OverlayRecord, box: tuple) -> None:
    """The film's subtitle bands (shaded rows across the crop box) and logos (boxes), as the
    overlay pass found them (stages/burned_in/overlays.py)."""
    x, _, w, _ = box
    for y0, y1 in overlays.subtitle_bands:
        ax.add_patch(Rectangle((x, y0), w, y1 - y0, color="#0a84ff", alpha=0.35, linewidth=0))
        ax.text(x + 4, y0, "subtitles", color="#0a84ff", fontsize=7, va="bottom")
    for lx, ly, lw, lh in overlays.logos:
        ax.add_patch(Rectangle((lx, ly), lw, lh, fill=False, edgecolor="#30d158", linewidth=2))
        ax.text(lx, ly + lh, "logo", color="#30d158", fontsize=7, va="top")


def _shown_region(
    summary: FilmSummary, box: tuple[int, int, int, int]
) -> tuple[int, int, int, int] | None:
    """The part of the crop box the clips show: the film's window (summary.json `window`), or
    for a folder written before the window was recorded, the clip stage's centring rule
    (center_crop cuts the box to the clip's aspect); None when neither can be read."""
    window = summary.window
    if window is not None and not {"x", "y", "w", "h"} & window.absent:
        return window.region
    try:
        from core.pixels import pixel_aspect
        from stages.clips import ClipConfig, output_region
        from stages.crop import CropBox

        settings = (summary.config or {}).get("clips") or {}
        known = {f.name for f in fields(ClipConfig)}
        config = ClipConfig(**{k: v for k, v in settings.items() if k in known})
        x, y, w, h = box
        aspect = pixel_aspect(summary.film.sar, summary.film.rotation)
        return output_region(CropBox(x, y, w, h, source=""), config, aspect)
    except (ImportError, TypeError, ValueError):
        return None


def _timeline(film: Film, manifest: pd.DataFrame, drops: pd.DataFrame) -> str:
    fps = film.summary.film.fps or first_value(manifest, "source_fps")
    scenes = film.summary.scenes
    if manifest.empty and drops.empty and not scenes:
        return not_available("no scenes, clips or drops recorded")
    figure = new_figure(12, 2.6)
    ax = figure.add_subplot()
    rows = ["drops", "clips", "scenes"]
    if scenes and fps:
        spans = [(s / fps, (e - s) / fps) for s, e in scenes]
        ax.broken_barh(spans, (2.1, 0.8), facecolors=["#6c8ebf", "#a9c4eb"] * len(spans))
    clips = [(r.start_time, r.end_time - r.start_time) for r in manifest.itertuples()]
    usable = manifest["usable"] if "usable" in manifest else pd.Series(True, manifest.index)
    colors = [
        _CLIP_COLORS["failed" if status != "ok" else "usable" if ok else "rejected"]
        for status, ok in zip(manifest["status"], usable.fillna(True).astype(bool))
    ]
    ax.broken_barh(clips, (1.1, 0.8), facecolors=colors, edgecolor="white", linewidth=0.3)
    for index, (reason, group) in enumerate(drops.groupby("reason")):
        spans = [(r.start_time, r.end_time - r.start_time) for r in group.itertuples()]
        color = _DROP_COLORS[index % len(_DROP_COLORS)]
        ax.broken_barh(spans, (0.1, 0.8), facecolors=color, label=reason)
    if not drops.empty:
        ax.legend(
            title="dropped",
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            fontsize=8,
            title_fontsize=8,
            frameon=False,
        )
    ax.set_yticks([0.5, 1.5, 2.5], rows)
    ax.set_xlabel("time (s)")
    ax.set_ylim(0, 3)
    duration = film.summary.film.duration
    if duration:
        ax.set_xlim(0, duration)
    note = "" if scenes else not_available("no scene list in summary.json")
    key = " ".join(
        f'<span class="swatch" style="background:{color}"></span>{name}'
        for name, color in _CLIP_COLORS.items()
    )
    legend = f'<p class="note timeline-key">clips: {key}</p>'
    return plot_img(figure, "timeline", "timeline of scenes, clips and drops") + legend + note


def _preview_grid(dataset: Dataset, manifest: pd.DataFrame, options: ReportOptions) -> str:
    playable = manifest[manifest["status"] == "ok"]
    if playable.empty:
        return not_available("no clip with status ok")
    chosen = evenly_spaced(playable, options.max_previews)
    if chosen.empty:
        return f'<p class="note">{len(playable)} clips; previews switched off.</p>'
    cards = [_preview_card(dataset, row, options.preview_width) for _, row in chosen.iterrows()]
    shown = (
        f"All {len(chosen)} clips."
        if len(chosen) == len(playable)
        else f"{len(chosen)} of {len(playable)} clips, evenly spaced over the film."
    )
    loop = (
        f"Each preview loops the clip's {first_value(manifest, 'num_frames')} frames at "
        f"{first_value(manifest, 'fps')} fps."
    )
    missing = int((~playable["instruction"].map(_has_instruction)).sum())
    if missing:
        loop += (
            f' <span class="na">{missing} of {len(playable)} clips have no instruction yet '
            "(captions not run on them: make caption)</span>"
        )
    return f'<p class="note">{shown} {loop}</p><div class="grid">{"".join(cards)}</div>'


def _has_instruction(instruction) -> bool:
    return isinstance(instruction, str) and bool(instruction)


def _preview_card(
    dataset: Dataset, row: pd.Series, width: int, note: str = "", css: str = "preview"
) -> str:
    data, mime = animated_preview(dataset.frames(row["clip_id"]), float(row["fps"]), width)
    height = round(width * row["height"] / row["width"])
    motion = (
        "motion: not measured"
        if pd.isna(row["motion_level"])
        else f"motion level {row['motion_level']} (scope {row['motion_scope']:.2f})"
    )
    decision = row.get("review_decision")
    if isinstance(decision, str):
        motion += f" · {decision}ed in review"
    instruction = row["instruction"]
    # a clip without one says nothing: the grid says once how many have none (_preview_grid)
    text = f"<q>{html.escape(instruction)}</q>" if _has_instruction(instruction) else ""
    return (
        f'<figure class="clip" title="{html.escape(row["clip_id"])}">'
        f'<img class="{css}" src="{data_uri(data, mime)}" width="{width}" height="{height}" '
        f'alt="clip {html.escape(row["clip_id"])}">'
        f"<figcaption><b>{html.escape(row['clip_id'][:8])}</b> #{row['clip_index']} "
        f"&middot; scene {row['scene_index']}<br>"
        f"{row['start_time']:.2f}&ndash;{row['end_time']:.2f} s &middot; frames "
        f"[{row['start_frame']}, {row['end_frame']})<br>{html.escape(motion)}<br>{text}"
        f"{_rejection_line(row, note)}</figcaption></figure>"
    )


def _usable_text(manifest: pd.DataFrame) -> str | None:
    if "usable" not in manifest:
        return None
    usable = int(manifest["usable"].astype(bool).sum())
    return f"{usable} of {len(manifest)} (see Rejected clips)"


def _rejection_line(row: pd.Series, note: str) -> str:
    """`note` is HTML (the measures, the deciding ones in bold)."""
    reasons = row.get("reject_reasons")
    if row.get("usable", True) or reasons is None:
        return ""
    text = html.escape("rejected: " + ", ".join(reasons))
    return f'<br><span class="na">{text}</span>' + (
        f'<br><span class="measures">{note}</span>' if note else ""
    )


def _rejected_clips(
    dataset: Dataset, manifest: pd.DataFrame, options: ReportOptions, thresholds: RejectConfig
) -> str:
    if "usable" not in manifest:
        return not_available("the shards have no usable column")
    rejected = manifest[~manifest["usable"].astype(bool)]
    if rejected.empty:
        return f'<p class="note">All {len(manifest)} clips are usable.</p>'
    reasons = sorted({r for rs in rejected["reject_reasons"] for r in rs})
    parts = [
        f'<p class="note">{len(rejected)} of {len(manifest)} clips are not usable: captioning '
        "and training leave them out. A clip with several reasons is shown under each.</p>"
    ]
    for reason in reasons:
        group = rejected[rejected["reject_reasons"].apply(lambda rs, r=reason: r in rs)]
        shown = evenly_spaced(group[group["status"] == "ok"], options.max_rejected_previews)
        cards = [
            # a class of their own: the clip grid's previews stay one per shown clip
            _preview_card(
                dataset,
                row,
                options.preview_width,
                _quality_note(row, thresholds),
                "rejected-preview",
            )
            for _, row in shown.iterrows()
        ]
        parts.append(
            f'<h4 id="{_anchor_text(reason)}">{html.escape(reason)}: {len(group)} clips '
            f"<small>{html.escape(reason_meaning(reason))}</small></h4>"
            f'<div class="grid">{"".join(cards)}</div>'
        )
    return "".join(parts)


def _quality_note(row: pd.Series, thresholds: RejectConfig) -> str:
    """The measured values behind a rejection, each beside its threshold; the ones that decided
    in bold (HTML)."""
    reasons = row.get("reject_reasons")
    measures = quality_measures(row, thresholds, [] if reasons is None else list(reasons))
    return "; ".join(
        f"<b>{html.escape(text)}</b>" if decided else html.escape(text)
        for _, text, decided in measures
    )


def _anchor_text(text: str) -> str:
    return "rejected-" + "".join(c if c.isalnum() else "-" for c in text)


def _failed_clips(manifest: pd.DataFrame) -> str:
    failed = manifest[manifest["status"] != "ok"]
    if failed.empty:
        return '<p class="note">No clip failed.</p>'
    rows = [
        (r.clip_id[:8], f"{r.start_time:.2f}-{r.end_time:.2f} s", format_value(r.error))
        for r in failed.itertuples()
    ]
    return html_table(["clip", "time", "error"], rows)


def _timings(summary: FilmSummary) -> str:
    seconds = summary.stage_seconds
    if not seconds:
        return not_available("no stage_seconds in summary.json")
    stages = list(seconds)
    figure = new_figure(7, 0.4 * len(stages) + 1.0)
    ax = figure.add_subplot()
    bars = ax.barh(stages, [seconds[s] for s in stages], color="#6c8ebf")
    ax.bar_label(bars, labels=[f"{seconds[s]:.1f} s" for s in stages], fontsize=8, padding=3)
    ax.invert_yaxis()
    ax.margins(x=0.15)  # room for the labels right of the longest bar
    ax.set_xlabel("seconds")
    ax.set_title(f"total {sum(seconds.values()):.1f} s", fontsize=9)
    return plot_img(figure, "timings", "stage timings")


def _config(summary: FilmSummary) -> str:
    if summary.config is None:
        return not_available("no config in summary.json")
    text = json.dumps(summary.config, indent=2, sort_keys=True, default=str)
    return (
        f"<details><summary>resolved configuration</summary>"
        f"<pre>{html.escape(text)}</pre></details>"
    )
