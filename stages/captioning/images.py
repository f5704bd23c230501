"""The two pictures the prompts show the model: the clip's frame grid and the reference sheet.

Frame grid: `num_frames` frames sampled evenly over the clip (first and last included), each
scaled to `frame_height`, tiled left to right, top to bottom, in time order. One picture per clip
matches the paper's prompt, which shows the frames as one image ("Image-2 (4 frames ...)").

Reference sheet: one tile per protagonist, its reference images side by side, with its 1-based
index printed in the corner: the character prompt asks for "the characters' index in Image-1".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from core.video import decode_mp4

SHEET_TILE_HEIGHT = 224
FRAME_GAP = 4  # white pixels between frames, so that neighbouring frames do not read as one
SHEET_IMAGES_PER_PROTAGONIST = 3  # more reference images add tokens, not recognition
_LABEL_SIZE = 40
_BACKGROUND = (255, 255, 255)
_SEPARATOR = 4  # white margin around each protagonist's tile


def sample_indices(total: int, count: int) -> list[int]:
    """`count` indices spread evenly over 0..total-1, first and last included."""
    if total <= 0:
        raise ValueError("the clip has no frames")
    if count >= total:
        return list(range(total))
    return [int(round(i)) for i in np.linspace(0, total - 1, count)]


def clip_frame_grid(video: bytes, num_frames: int, frame_height: int, columns: int) -> Image.Image:
    frames = decode_mp4(video)
    picked = [frames[i] for i in sample_indices(len(frames), num_frames)]
    return tile_grid([Image.fromarray(f) for f in picked], frame_height, columns, gap=FRAME_GAP)


def tile_grid(
    images: Sequence[Image.Image], height: int, columns: int, gap: int = 0
) -> Image.Image:
    """Images scaled to `height`, in rows of `columns`, `gap` white pixels between cells."""
    scaled = [_scale_to_height(im, height) for im in images]
    width = max(im.width for im in scaled)
    columns = max(1, min(columns, len(scaled)))
    rows = -(-len(scaled) // columns)
    grid = Image.new(
        "RGB",
        (width * columns + gap * (columns - 1), height * rows + gap * (rows - 1)),
        _BACKGROUND,
    )
    for i, im in enumerate(scaled):
        grid.paste(im, ((i % columns) * (width + gap), (i // columns) * (height + gap)))
    return grid


@dataclass(frozen=True)
class ReferenceSheet:
    names: tuple[str, ...]  # index i+1 on the sheet is names[i]
    image: Image.Image
    digest: str  # sha256 of names and image bytes: a changed sheet changes the caption cache key


def build_reference_sheet(
    protagonists: Sequence[tuple[str, Sequence[str | Path]]],
) -> ReferenceSheet:
    """One labelled tile per (name, [image paths]) in the given order."""
    if not protagonists:
        raise ValueError("no protagonists to build a reference sheet from")
    tiles, digest = [], hashlib.sha256()
    for index, (name, paths) in enumerate(protagonists, start=1):
        if not paths:
            raise ValueError(f"protagonist {name!r} has no reference images")
        images = [
            _load_reference(Path(p), name) for p in list(paths)[:SHEET_IMAGES_PER_PROTAGONIST]
        ]
        tiles.append(_labelled_tile(images, index))
        digest.update(name.encode() + b"\0")
        for image in images:
            digest.update(image.tobytes())
    columns = 1 if len(tiles) <= 4 else 2  # one protagonist per row reads unambiguously
    sheet = tile_grid(tiles, SHEET_TILE_HEIGHT + 2 * _SEPARATOR, columns)
    return ReferenceSheet(tuple(n for n, _ in protagonists), sheet, digest.hexdigest())


def _load_reference(path: Path, name: str) -> Image.Image:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: reference image of {name!r} not found")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except OSError as exc:
        raise ValueError(
            f"{path}: reference image of {name!r} is not a readable image ({exc})"
        ) from exc


def _labelled_tile(images: list[Image.Image], index: int) -> Image.Image:
    row = tile_grid(images, SHEET_TILE_HEIGHT, len(images))
    draw = ImageDraw.Draw(row)
    font = ImageFont.load_default(size=_LABEL_SIZE)
    label = str(index)
    box = draw.textbbox((8, 4), label, font=font)
    draw.rectangle((box[0] - 6, box[1] - 4, box[2] + 6, box[3] + 4), fill=(0, 0, 0))
    draw.text((8, 4), label, fill=(255, 255, 0), font=font)
    framed = Image.new(
        "RGB", (row.width + 2 * _SEPARATOR, row.height + 2 * _SEPARATOR), _BACKGROUND
    )
    framed.paste(row, (_SEPARATOR, _SEPARATOR))
    return framed


def _scale_to_height(image: Image.Image, height: int) -> Image.Image:
    width = max(1, round(image.width * height / image.height))
    return image.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
