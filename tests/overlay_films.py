"""Labelled overlay films (issue 28): real pictures of the bundled media with burned-in subtitles,
a semi-transparent corner logo and in-world text drawn on them, and for every frame what was
drawn where.

Each shot pans across a still picture taken from tests/media or samples/. Overlay marks are
composited on the frame after the pan, so they hold still while the picture moves; a sign is
pasted into the still picture before the pan, so it moves with it (in-world text). Subtitles run
on their own timing, across cuts, with gaps; they are drawn with real fonts (DejaVu Sans for
Latin, Noto Sans CJK for Chinese), white or yellow, with a black outline or a soft shadow, one
or two lines, at the bottom and sometimes the top, from 12 pixels up. Every mark's box is the
bounding box of the pixels it changed (outline and shadow included), so the labels are exact.
Text that is part of a source picture itself (a shop sign in bikes.mp4) is in-world text too,
left unlabelled: no overlay rule may count it.

The films (session fixtures in tests/conftest.py):
- `wide_film`: 640x360 (16:9). Subtitles, a logo in the top-right corner of every frame, a sign
  in one shot. The 3:2 window (540x360) can move sideways, away from the logo, not away from the
  subtitles.
- `academy_film`: 480x360 (4:3). Single-line subtitles at the bottom only. The 3:2 window
  (480x320) can move up, clear of them.
- `signs_film`: 640x360 with in-world text only (signs in two shots): nothing to reject.

The fonts come from Debian's fonts-dejavu-core and fonts-noto-cjk (scripts/install-fonts.sh,
run by `make test`); a missing font is an error that names the script, never a skip.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

ROOT = Path(__file__).resolve().parent.parent
FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/local/share/fonts"))
# first file found wins; Debian's packages put them under /usr/share/fonts
FONT_FILES = {
    "latin": ("DejaVuSans.ttf",),
    "latin_bold": ("DejaVuSans-Bold.ttf",),
    "cjk": ("NotoSansCJK-Regular.ttc", "wqy-zenhei.ttc"),
}
WHITE, YELLOW, BLACK = (255, 255, 255), (255, 222, 40), (0, 0, 0)
SUBTITLE, LOGO, IN_WORLD = "subtitle", "logo", "in_world"
PLAYER, GATE = "player", "gate"  # a web player's interface; a film gate's rounded corners
CREDIT = "credit"  # staff credits over the middle of the picture


class FontMissing(RuntimeError):
    """A font the films are drawn with is not installed."""


def font_path(kind: str) -> Path:
    """The font file for `kind` (latin, latin_bold, cjk), searched in Debian's font folders and
    in ANIMEGAMER_FONT_DIRS (colon-separated)."""
    extra = [Path(p) for p in os.environ.get("ANIMEGAMER_FONT_DIRS", "").split(":") if p]
    for name in FONT_FILES[kind]:
        for folder in (*extra, *FONT_DIRS):
            found = sorted(folder.rglob(name)) if folder.is_dir() else []
            if found:
                return found[0]
    raise FontMissing(
        f"font {' or '.join(FONT_FILES[kind])} not found under "
        f"{', '.join(map(str, (*extra, *FONT_DIRS)))}: run scripts/install-fonts.sh "
        "(Debian's fonts-dejavu-core and fonts-noto-cjk)"
    )


@functools.cache
def _font(kind: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(font_path(kind)), size)


# ---------------------------------------------------------------- what is drawn


@dataclass(frozen=True)
class Mark:
    """One thing drawn on a frame: its kind, its box (x, y, w, h) in the film's pixels, clipped
    to the frame, and its text."""

    kind: str
    box: tuple[int, int, int, int]
    text: str


@dataclass(frozen=True)
class Subtitle:
    """A subtitle event: shown on frames [start, stop)."""

    start: int
    stop: int
    lines: tuple[str, ...]
    size: int  # font size in pixels
    where: str = "bottom"  # or "top"
    colour: tuple[int, int, int] = WHITE
    style: str = "outline"  # or "shadow"
    script: str = "latin"  # or "cjk"


@dataclass(frozen=True)
class Credit:
    """A staff credit over the middle of the picture, as an opening's: thin white lines with no
    outline, their top-left corner at (x, y), shown on frames [start, stop)."""

    start: int
    stop: int
    lines: tuple[str, ...]
    x: int
    y: int
    size: int = 15


@dataclass(frozen=True)
class Sign:
    """In-world text: a plate with text, pasted into a shot's picture at (x, y) of the picture."""

    text: str
    x: int
    y: int
    size: int = 22
    script: str = "latin_bold"


@dataclass(frozen=True)
class Shot:
    """`frames` frames panning `pan` pixels a frame across `picture` (a key of the pictures),
    from its left edge (or its right edge when `pan` is negative). `flap`: a held shot's
    limited animation, a small patch in the picture's middle (a mouth) drawn anew every `flap`
    frames, two drawings in turn (0: none)."""

    picture: str
    frames: int
    pan: int = 2
    signs: tuple[Sign, ...] = ()
    flap: int = 0


@dataclass
class LabelledFilm:
    """A written film and what each of its frames shows."""

    path: Path
    width: int
    height: int
    fps: int
    cuts: list[int]  # the frames that start a shot, after the first
    marks: list[list[Mark]]  # per frame
    subtitles: list[Subtitle] = field(default_factory=list)

    @property
    def num_frames(self) -> int:
        return len(self.marks)

    def frames_with(self, kind: str) -> list[int]:
        return [i for i, marks in enumerate(self.marks) if any(m.kind == kind for m in marks)]

    def boxes(self, kind: str, frame: int) -> list[tuple[int, int, int, int]]:
        return [m.box for m in self.marks[frame] if m.kind == kind]

    def to_dict(self) -> dict:
        """The film as JSON values (conftest.py's `built_once` shares it between processes)."""
        return {
            "path": str(self.path),
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "cuts": self.cuts,
            "marks": [[[m.kind, m.box, m.text] for m in marks] for marks in self.marks],
            "subtitles": [
                [e.start, e.stop, e.lines, e.size, e.where, e.colour, e.style, e.script]
                for e in self.subtitles
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> LabelledFilm:
        """The film `to_dict` gave, its boxes, lines and colours tuples again."""
        return cls(
            Path(data["path"]),
            data["width"],
            data["height"],
            data["fps"],
            list(data["cuts"]),
            [[Mark(kind, tuple(box), text) for kind, box, text in m] for m in data["marks"]],
            [
                Subtitle(start, stop, tuple(lines), size, where, tuple(colour), style, script)
                for start, stop, lines, size, where, colour, style, script in data["subtitles"]
            ],
        )

    def overlay_truth(self) -> dict:
        """What a perfect film-level overlay analysis finds (the fields of core/film.py's
        OverlayRecord): the row bands every subtitle box falls in, merged where they touch, the
        share of frames with a subtitle, and the logo boxes."""
        rows = sorted(
            (m.box[1], m.box[1] + m.box[3])
            for marks in self.marks
            for m in marks
            if m.kind == SUBTITLE
        )
        bands: list[list[int]] = []
        for top, bottom in rows:
            if bands and top <= bands[-1][1]:
                bands[-1][1] = max(bands[-1][1], bottom)
            else:
                bands.append([top, bottom])
        logos = sorted({m.box for marks in self.marks for m in marks if m.kind == LOGO})
        return {
            "subtitle_bands": bands,
            "subtitle_share": len(self.frames_with(SUBTITLE)) / self.num_frames,
            "logos": [list(box) for box in logos],
        }


def shows(film: LabelledFilm, kind: str, row: dict) -> bool:
    """Whether any frame of a clip (a shard row: its frame_indices and crop_x/y/w/h window)
    shows a mark of `kind` inside the clip's window."""
    x, y, w, h = row["crop_x"], row["crop_y"], row["crop_w"], row["crop_h"]
    return any(
        bx < x + w and bx + bw > x and by < y + h and by + bh > y
        for i in range(row["frame_indices"][0], row["frame_indices"][-1] + 1)
        for bx, by, bw, bh in film.boxes(kind, i)
    )


# ---------------------------------------------------------------- drawing


@dataclass
class _Patch:
    """A mark ready to composite: RGBA pixels and where their top-left corner goes."""

    rgba: np.ndarray
    x: int
    y: int
    kind: str
    text: str


def _text_patch(lines, kind: str, size: int, colour, style: str, alpha: float = 1.0) -> np.ndarray:
    """RGBA pixels of centred text lines, with a black outline or a soft drop shadow, cut to
    the pixels drawn."""
    font = _font(kind, size)
    stroke = max(1, round(size / 10)) if style == "outline" else 0
    spacing = round(size * 0.25)
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    width = max(probe.textbbox((0, 0), line, font=font, stroke_width=stroke)[2] for line in lines)
    line_height = size + 2 * stroke + spacing
    pad = size  # room for the shadow and the outline
    canvas_w, canvas_h = width + 2 * pad, line_height * len(lines) + 2 * pad
    layer = Image.new("RGBA", (canvas_w, canvas_h), (0, 0, 0, 0))
    if style == "shadow":
        shadow = Image.new("RGBA", layer.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(shadow)
        for n, line in enumerate(lines):
            x = pad + (width - probe.textlength(line, font=font)) / 2 + max(1, size // 8)
            y = pad + n * line_height + max(1, size // 8)
            draw.text((x, y), line, font=font, fill=(0, 0, 0, 220))
        layer = Image.alpha_composite(layer, shadow.filter(ImageFilter.GaussianBlur(size / 14)))
    draw = ImageDraw.Draw(layer)
    for n, line in enumerate(lines):
        x = pad + (width - probe.textlength(line, font=font)) / 2
        draw.text(
            (x, pad + n * line_height),
            line,
            font=font,
            fill=(*colour, 255),
            stroke_width=stroke,
            stroke_fill=(*BLACK, 255),
        )
    rgba = np.asarray(layer).copy()
    rgba[..., 3] = (rgba[..., 3] * alpha).astype(np.uint8)
    ys, xs = np.nonzero(rgba[..., 3])
    return rgba[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]


def _subtitle_patch(event: Subtitle, width: int, height: int, margin: int) -> _Patch:
    rgba = _text_patch(event.lines, event.script, event.size, event.colour, event.style)
    h, w = rgba.shape[:2]
    y = margin if event.where == "top" else height - margin - h
    return _Patch(rgba, (width - w) // 2, y, SUBTITLE, " / ".join(event.lines))


def _credit_patch(credit: Credit) -> _Patch:
    rgba = _text_patch(credit.lines, "latin", credit.size, WHITE, "none")
    return _Patch(rgba, credit.x, credit.y, CREDIT, " / ".join(credit.lines))


def _logo_patch(width: int, text: str = "ANI+") -> _Patch:
    """A streaming site's mark: bold white text on a rounded dark plate, 55 % opaque, in the
    top-right corner."""
    glyphs = _text_patch((text,), "latin_bold", 15, WHITE, "outline")
    h, w = glyphs.shape[:2]
    plate = Image.new("RGBA", (w + 12, h + 8), (0, 0, 0, 0))
    ImageDraw.Draw(plate).rounded_rectangle((0, 0, w + 11, h + 7), radius=5, fill=(20, 20, 20, 160))
    plate.alpha_composite(Image.fromarray(glyphs), (6, 4))
    rgba = np.asarray(plate).copy()
    rgba[..., 3] = (rgba[..., 3] * 0.55).astype(np.uint8)
    return _Patch(rgba, width - rgba.shape[1] - 10, 10, LOGO, text)


def _opaque_logo_patch(width: int) -> _Patch:
    """A streaming site's opaque mark, scaled with the picture: white bold text on a solid
    blue plate, in the top-right corner."""
    size = max(15, width // 40)
    glyphs = _text_patch(("STREAMX",), "latin_bold", size, WHITE, "outline")
    h, w = glyphs.shape[:2]
    pad = size // 2
    plate = Image.new("RGBA", (w + 2 * pad, h + pad), (30, 60, 140, 255))
    plate.alpha_composite(Image.fromarray(glyphs), (pad, pad // 2))
    rgba = np.asarray(plate).copy()
    inset = width // 48
    return _Patch(rgba, width - rgba.shape[1] - inset, inset, LOGO, "STREAMX")


def _player_patch(width: int, height: int) -> _Patch:
    """A web player's control bar along the bottom: a dark translucent panel, a red progress
    line across most of the width, a play button and a time code."""
    bar_h = max(24, height // 9)
    layer = Image.new("RGBA", (width, bar_h), (10, 10, 10, 170))
    draw = ImageDraw.Draw(layer)
    line_y = bar_h // 4
    draw.rectangle((width // 40, line_y, width - width // 40, line_y + 2), fill=(90, 90, 90, 255))
    draw.rectangle((width // 40, line_y, width // 3, line_y + 2), fill=(230, 30, 30, 255))
    icon = bar_h // 2
    top = line_y + 6
    draw.polygon(
        [(12, top), (12, top + icon - 4), (12 + icon // 2, top + (icon - 4) // 2)], fill=WHITE
    )
    font = _font("latin", max(10, bar_h // 3))
    draw.text((20 + icon, top), "4:07 / 23:40", font=font, fill=(*WHITE, 255))
    return _Patch(np.asarray(layer).copy(), 0, height - bar_h, PLAYER, "player bar")


def _gate_patches(width: int, height: int, radius: int) -> list[_Patch]:
    """A film gate's four rounded black corners (what lies outside a quarter circle)."""
    patches = []
    yy, xx = np.mgrid[0:radius, 0:radius]
    outside = (xx - radius + 0.5) ** 2 + (yy - radius + 0.5) ** 2 > radius**2  # top-left corner
    for flip_x, flip_y in ((False, False), (True, False), (False, True), (True, True)):
        mask = outside[:, ::-1] if flip_x else outside
        mask = mask[::-1] if flip_y else mask
        rgba = np.zeros((radius, radius, 4), np.uint8)
        rgba[..., :3] = 6
        rgba[..., 3] = mask * 255
        x = width - radius if flip_x else 0
        y = height - radius if flip_y else 0
        patches.append(_Patch(rgba, x, y, GATE, "gate corner"))
    return patches


@functools.cache
def _sign_plate(sign: Sign) -> np.ndarray:
    """An RGB street sign: light text on a dark green plate with a border."""
    glyphs = _text_patch((sign.text,), sign.script, sign.size, (240, 240, 230), "outline")
    h, w = glyphs.shape[:2]
    plate = Image.new("RGB", (w + 16, h + 12), (20, 90, 50))
    ImageDraw.Draw(plate).rectangle((0, 0, w + 15, h + 11), outline=(230, 230, 230), width=2)
    plate.paste(Image.fromarray(glyphs), (8, 6), Image.fromarray(glyphs))
    return np.asarray(plate)


def _composite(frame: np.ndarray, patch: _Patch) -> tuple[int, int, int, int] | None:
    """Blend `patch` onto `frame` in place; the box of the pixels it changed, None if none."""
    h, w = patch.rgba.shape[:2]
    x0, y0 = max(0, patch.x), max(0, patch.y)
    x1, y1 = min(frame.shape[1], patch.x + w), min(frame.shape[0], patch.y + h)
    if x1 <= x0 or y1 <= y0:
        return None
    part = patch.rgba[y0 - patch.y : y1 - patch.y, x0 - patch.x : x1 - patch.x]
    alpha = part[..., 3:4].astype(np.float32) / 255
    region = frame[y0:y1, x0:x1]
    region[...] = (part[..., :3] * alpha + region * (1 - alpha) + 0.5).astype(np.uint8)
    ys, xs = np.nonzero(part[..., 3])
    if ys.size == 0:
        return None
    return (
        x0 + int(xs.min()),
        y0 + int(ys.min()),
        int(xs.max() - xs.min()) + 1,
        int(ys.max() - ys.min()) + 1,
    )


# ---------------------------------------------------------------- pictures and films


PICTURES = {  # name: (file, frame index); real shots of the bundled media
    "bikes_street": (ROOT / "tests/media/bikes.mp4", 20),
    "bikes_road": (ROOT / "tests/media/bikes.mp4", 100),
    "bikes_turn": (ROOT / "tests/media/bikes.mp4", 160),
    "bikes_rider": (ROOT / "tests/media/bikes.mp4", 215),
    "bunny_meadow": (ROOT / "tests/media/bigbuckbunny_5s.mp4", 30),
    "bunny_tree": (ROOT / "tests/media/bigbuckbunny_5s.mp4", 110),
    "sintel_snow": (ROOT / "samples/sintel_trailer.mp4", 150),
    "sintel_town": (ROOT / "samples/sintel_trailer.mp4", 300),
}
SINTEL_PICTURE_ROWS = slice(58, 422)  # the trailer's letterbox removed


def read_pictures(names) -> dict[str, np.ndarray]:
    """The named pictures (RGB), each decoded once a process (the three films share five of
    their eight); the caller may not change them."""
    return {name: _picture(name) for name in names}


@functools.cache
def _picture(name: str) -> np.ndarray:
    """One picture, decoded from the key frame before it (the pipeline's FrameReader: the same
    pixels as decoding from the film's first frame, without the frames before that key frame:
    sintel_town, frame 300 of the sample, was 301 frames of 854x480 per film)."""
    from core.video import FrameReader
    from stages.probe import Probe

    path, index = PICTURES[name]
    reader = FrameReader(str(path), Probe().process(path).frame_pts, threads=1)
    [(_, frame)] = reader.frames(index, index + 1)
    picture = frame.to_ndarray(format="rgb24")
    if "sintel" in path.name:
        picture = picture[SINTEL_PICTURE_ROWS]
    picture.flags.writeable = False
    return picture


def _pan_source(picture: np.ndarray, shot: Shot, width: int, height: int) -> np.ndarray:
    """The shot's picture scaled to the film's height and wide enough for its pan, signs
    pasted in."""
    need = width + abs(shot.pan) * shot.frames
    scale = max(height / picture.shape[0], need / picture.shape[1])
    size = (int(np.ceil(picture.shape[1] * scale)), int(np.ceil(picture.shape[0] * scale)))
    scaled = cv2.resize(
        picture, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    )
    top = (scaled.shape[0] - height) // 2
    source = np.ascontiguousarray(scaled[top : top + height])
    for sign in shot.signs:
        plate = _sign_plate(sign)
        source[sign.y : sign.y + plate.shape[0], sign.x : sign.x + plate.shape[1]] = plate
    return source


def write_labelled_film(
    path: Path,
    size: tuple[int, int],
    shots: list[Shot],
    subtitles: list[Subtitle] = (),
    logo: bool | str = False,
    fps: int = 24,
    margin: int = 10,
    player: tuple[tuple[int, int], ...] = (),
    gate: int = 0,
    credits: tuple[Credit, ...] = (),
) -> LabelledFilm:
    """Write the film (H.264, crf 18) and return it with its labels. `size` is (width, height);
    `margin` is the subtitles' distance from the frame's top or bottom edge; `logo` True (a
    semi-transparent plate) or "opaque"; `player`: frame ranges [start, stop) that show a web
    player's control bar; `gate`: the radius of a film gate's rounded black corners (0: none);
    `credits`: staff credits over the middle of the picture."""
    width, height = size
    pictures = read_pictures({shot.picture for shot in shots})
    patches: dict[Subtitle | Credit, _Patch] = {
        event: _subtitle_patch(event, width, height, margin) for event in subtitles
    }
    patches |= {credit: _credit_patch(credit) for credit in credits}
    corner = (
        (_opaque_logo_patch(width) if logo == "opaque" else _logo_patch(width)) if logo else None
    )
    bar = _player_patch(width, height) if player else None
    corners = _gate_patches(width, height, gate) if gate else []
    marks: list[list[Mark]] = []
    cuts: list[int] = []
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "18", "preset": "ultrafast", "g": str(fps)}
        for shot in shots:
            if marks:
                cuts.append(len(marks))
            source = _pan_source(pictures[shot.picture], shot, width, height)
            for k in range(shot.frames):
                frame, frame_marks = _shot_frame(source, shot, k, width, len(marks))
                showing = any(start <= len(marks) < stop for start, stop in player)
                for patch in (
                    [p for e, p in patches.items() if e.start <= len(marks) < e.stop]
                    + ([corner] if corner else [])
                    + ([bar] if bar and showing else [])
                    + corners
                ):
                    box = _composite(frame, patch)
                    if box is not None:
                        frame_marks.append(Mark(patch.kind, box, patch.text))
                marks.append(frame_marks)
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return LabelledFilm(path, width, height, fps, cuts, marks, list(subtitles))


def _shot_frame(source: np.ndarray, shot: Shot, k: int, width: int, index: int):
    """Frame `k` of a shot (a copy, to draw on) and the marks of its in-world signs."""
    left = k * shot.pan if shot.pan >= 0 else source.shape[1] - width + k * shot.pan
    frame = source[:, left : left + width].copy()
    if shot.flap and (k // shot.flap) % 2:
        height = frame.shape[0]
        mouth = frame[height // 2 : height // 2 + 24, width // 2 - 30 : width // 2 + 30]
        mouth[:] = 255 - mouth
    marks = []
    for sign in shot.signs:
        plate_h, plate_w = _sign_plate(sign).shape[:2]
        x0, x1 = max(0, sign.x - left), min(width, sign.x + plate_w - left)
        if x1 > x0:
            marks.append(Mark(IN_WORLD, (x0, sign.y, x1 - x0, plate_h), sign.text))
    return frame, marks


# ---------------------------------------------------------------- the three films

LATIN = [
    ("Where did you put the map?",),
    ("Behind the station,", "next to the old clock."),
    ("We have to go now!",),
    ("Don't look back.",),
    ("I'll wait for you here", "until the lights come on."),
    ("Tomorrow, then.",),
]
CJK = [
    ("你把地图放在哪里了？",),
    ("我们必须现在就走！",),
    ("别回头。", "我会在这里等你。"),
    ("车站后面。",),
]


def wide_film(path: Path) -> LabelledFilm:
    """640x360: five shots of 50 frames (cuts at 50, 100, 150, 200); subtitles at the bottom
    and, once, a translator's note at the top, on their own timing; a logo on every frame; a
    sign in the third shot."""
    shots = [
        Shot("bikes_street", 50, 2),
        Shot("sintel_snow", 50, -2),
        Shot("bikes_road", 50, 3, signs=(Sign("CAFE 24", 560, 120),)),
        Shot("bunny_meadow", 50, 1),
        Shot("sintel_town", 50, -1),
    ]
    subtitles = [
        Subtitle(6, 40, LATIN[0], 16),
        Subtitle(46, 90, CJK[0], 20, colour=YELLOW, script="cjk"),  # across the cut at 50
        Subtitle(104, 141, LATIN[1], 14, style="shadow"),
        Subtitle(141, 178, ("T/N: the old clock is the meeting place",), 12, "top", YELLOW),
        Subtitle(145, 178, CJK[1], 24, script="cjk"),  # across the cut at 150
        Subtitle(190, 236, CJK[2], 28, style="shadow", script="cjk"),  # across the cut at 200
    ]
    return write_labelled_film(path, (640, 360), shots, subtitles, logo=True)


def academy_film(path: Path) -> LabelledFilm:
    """480x360 (4:3): four shots of 52 frames (cuts at 52, 104, 156); one line of subtitle at
    the bottom on most frames, 12 to 18 pixels, with gaps. Every 2-second window of it shows a
    subtitle in the centred 480x320 window; none does 20 rows higher."""
    shots = [
        Shot("bunny_tree", 52, 2),
        Shot("bikes_turn", 52, -2),
        Shot("sintel_snow", 52, 1),
        Shot("bikes_rider", 52, 2),
    ]
    subtitles = [
        Subtitle(4, 44, LATIN[2], 12),
        Subtitle(50, 95, CJK[3], 16, colour=YELLOW, script="cjk"),  # across the cut at 52
        Subtitle(110, 150, LATIN[3], 14, style="shadow"),
        Subtitle(150, 200, LATIN[5], 18, colour=YELLOW, style="shadow"),  # across 156
    ]
    return write_labelled_film(path, (480, 360), shots, subtitles, margin=12)


def signs_film(path: Path) -> LabelledFilm:
    """640x360: three shots of 56 frames, with in-world signs in the first and the last and no
    overlay at all."""
    shots = [
        Shot("bikes_street", 56, 2, signs=(Sign("USA", 200, 90, 26), Sign("OPEN", 700, 200, 18))),
        Shot("bunny_meadow", 56, 1),
        Shot("sintel_town", 56, -2, signs=(Sign("車站", 300, 60, 24, "cjk"),)),
    ]
    return write_labelled_film(path, (640, 360), shots)


def noted_film(path: Path) -> LabelledFilm:
    """640x360: four shots of 48 frames (cuts at 48, 96, 144) and one translator's note at the
    top for 2 s (frames 60-108), 13 pixels: too rare to make a band. No other overlay."""
    shots = [
        Shot("bikes_road", 48, 2),
        Shot("sintel_snow", 48, -2),
        Shot("bunny_meadow", 48, 1),
        Shot("bikes_turn", 48, 2),
    ]
    note = Subtitle(60, 108, ("T/N: Senpai means an older schoolmate",), 13, "top", YELLOW)
    return write_labelled_film(path, (640, 360), shots, [note])


def short_logo_film(path: Path) -> LabelledFilm:
    """1920x1080, 19 s at 8 fps: six shots of 25 frames, a dialogue's shot / reverse shot (the
    street, the snow, the street, the snow) and two of the meadow, with an opaque streaming
    site's mark in the top-right corner of every frame."""
    shots = [
        Shot("bikes_street", 25, 2),
        Shot("sintel_snow", 25, -2),
        Shot("bikes_street", 25, -2),
        Shot("sintel_snow", 25, 2),
        Shot("bunny_meadow", 25, 2),
        Shot("bunny_tree", 25, -2),
    ]
    return write_labelled_film(path, (1920, 1080), shots, logo="opaque", fps=8)


def player_film(path: Path) -> LabelledFilm:
    """640x360: a screen capture of a web player, four shots of 60 frames; the control bar
    (a progress line and a time code on a dark panel) comes and goes: frames 0-40, 90-150 and
    200-240."""
    shots = [
        Shot("bikes_street", 60, 2),
        Shot("sintel_town", 60, -2),
        Shot("bunny_tree", 60, 1),
        Shot("bikes_rider", 60, 2),
    ]
    return write_labelled_film(path, (640, 360), shots, player=((0, 40), (90, 150), (200, 240)))


def gate_film(path: Path) -> LabelledFilm:
    """480x360 (4:3): a transfer of old film, five shots of 56 frames with the gate's rounded
    black corners (radius 28) on every frame, and no overlay."""
    shots = [
        Shot("bikes_road", 56, 2),
        Shot("sintel_snow", 56, -2),
        Shot("bunny_meadow", 56, 1),
        Shot("bikes_rider", 56, 2),
        Shot("sintel_town", 56, -1),
    ]
    return write_labelled_film(path, (480, 360), shots, gate=28)


def dialogue_film(path: Path) -> LabelledFilm:
    """640x480 (4:3), 7.5 s as a TV dialogue scene: two shots of 90 frames of one held
    picture (no pan) with a mouth that flaps on 3s, then on 2s (limited animation), each with one subtitle of its own, the lines of different widths
    on the same rows. The band has only two sightings that differ, as in the real One Piece
    fansub its shots were modelled on."""
    shots = [Shot("bunny_tree", 90, 0, flap=3), Shot("sintel_town", 90, 0, flap=2)]
    subtitles = [
        Subtitle(0, 84, CJK[0], 26, script="cjk"),
        Subtitle(98, 180, CJK[3], 26, script="cjk"),
    ]
    return write_labelled_film(path, (640, 480), shots, subtitles, margin=16)


OPENING_CREDITS = [
    ("Key Animation", "Aiko Tanaka   Ren Mori"),
    ("Background Art", "Studio Kaze"),
    ("Colour Design", "Mika Sato"),
    ("Director of Photography", "Jun Ito"),
]


def credits_film(path: Path) -> LabelledFilm:
    """640x360: five panning shots of 48 frames (cuts at 48, 96, 144, 192); staff credits of
    15-pixel thin white letters over the middle of the picture, as an opening's, on frames
    96-192, the third and fourth shots (four credits of 24 frames, left and right of the middle
    by turns). The whole-frame rule's narrow look reads them 0.0. No other overlay."""
    shots = [
        Shot("bikes_road", 48, 2),
        Shot("sintel_snow", 48, -2),
        Shot("bunny_meadow", 48, 1),
        Shot("bikes_turn", 48, 2),
        Shot("sintel_town", 48, -1),
    ]
    credits = tuple(
        Credit(96 + 24 * k, 120 + 24 * k, lines, 90 if k % 2 == 0 else 380, 120 + 30 * (k % 3))
        for k, lines in enumerate(OPENING_CREDITS)
    )
    return write_labelled_film(path, (640, 360), shots, credits=credits)
