"""Text in clips (issue 13; in-world text: stages/burned_in/in_world_text.py): subtitles, credits
and captions on real frames of the sample film are `text`; a sign that pans with the picture is not."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import make_clip
from quality_clips import THRESHOLDS, judged

from stages.quality import QualityStage


def test_subtitles_drawn_on_real_frames_are_text(quality_stage, shots):
    for picture in shots.values():
        plain = quality_stage.process(make_clip(frames=np.stack([picture] * 16)))
        assert plain.quality_text_area <= THRESHOLDS.text_max_area and judged(plain)[0]
        subtitled = picture.copy()
        cv2.putText(
            subtitled,
            "I have been looking for you",
            (160, 445),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.9,
            (255, 255, 255),
            2,
            cv2.LINE_AA,
        )
        clip = quality_stage.process(make_clip(frames=np.stack([subtitled] * 16)))
        assert judged(clip) == (False, ["text"]), clip.quality_text_area


def test_scrolling_credits_are_text(quality_stage):
    page = np.zeros((1400, 720, 3), np.uint8)
    for line in range(30):
        cv2.putText(
            page,
            f"Character animator {line}  ...  A. Person",
            (120, 60 + 45 * line),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.8,
            (230, 230, 230),
            2,
            cv2.LINE_AA,
        )
    frames = np.stack([page[12 * k : 12 * k + 480] for k in range(16)])  # rolling up 12 px
    clip = quality_stage.process(make_clip(frames=frames))
    assert "text" in judged(clip)[1] and clip.quality_text_area > 0.02


def test_a_credit_crawl_over_black_is_text_not_in_world(quality_stage):
    """A hybrid DVD's credits (/work/anime/make_dvd.sh): DejaVu Bold lines 70 px apart crawling
    up over black, a line cut at the top or bottom edge in most frames. The detector misses the
    cut lines, whose fringes then gave the masked picture a shift equal to the crawl, and every
    line passed for in-world text: 0.0 on 2 usable crawl clips of each real hybrid copy."""
    from PIL import Image, ImageDraw, ImageFont

    roles = ["Key animation", "Background art", "Photography", "Colour design", "Sound"]
    page = Image.new("RGB", (720, 1200))
    draw, font = ImageDraw.Draw(page), ImageFont.truetype(DEJAVU, 28)
    for line in range(16):
        text = f"{roles[line % len(roles)]}  (sample crawl)"
        draw.text(((720 - draw.textlength(text, font=font)) / 2, 40 + 70 * line), text, font=font)
    page = np.asarray(page)
    for step in (6, 12):  # pixels a clip frame: 45 and 90 px a second
        for start in (0, 35):
            frames = [page[start + step * k : start + step * k + 480] for k in range(16)]
            assert _text_area(quality_stage, frames) > THRESHOLDS.text_max_area, (step, start)


# In-world text (stages/burned_in/in_world_text.py): a sign that pans with the picture is part of it; a
# caption that holds still over a pan, text that scrolls over a still picture, and text in a
# still shot are all counted.
PAN = 6  # pixels a frame, as a clip sampled every 3rd frame of a 2 px/frame pan sees it
DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def _lettered(picture: np.ndarray, text: str, where: tuple[int, int]) -> np.ndarray:
    """`text` in DejaVu Bold (34 px), white with a black outline, at `where` (x, y)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(picture)
    font = ImageFont.truetype(DEJAVU, 34)
    ImageDraw.Draw(image).text(
        where, text, font=font, fill=(255, 255, 255), stroke_width=3, stroke_fill=(0, 0, 0)
    )
    return np.asarray(image)


@pytest.fixture(scope="module")
def wide_street(shots) -> np.ndarray:
    """A real shot widened to 720 + 15 pans, so that a 720-wide window can travel across it."""
    return cv2.resize(shots[700], (720 + 15 * PAN, 480), interpolation=cv2.INTER_CUBIC)


def _text_area(stage: QualityStage, frames) -> float:
    return stage.process(make_clip(frames=np.stack(frames))).quality_text_area


def test_a_sign_that_pans_with_the_picture_is_in_world(quality_stage, wide_street):
    signed = _lettered(wide_street, "HOTEL CENTRAL", (260, 120))
    panning = [signed[:, PAN * k : PAN * k + 720] for k in range(16)]
    still = [signed[:, 45:765]] * 16
    assert _text_area(quality_stage, still) > THRESHOLDS.text_max_area  # the detector sees it
    assert _text_area(quality_stage, panning) <= THRESHOLDS.text_max_area


def test_a_caption_still_over_a_pan_and_text_scrolling_over_a_still_picture_count(
    quality_stage, wide_street
):
    caption = [
        _lettered(wide_street[:, PAN * k : PAN * k + 720], "HOTEL CENTRAL", (200, 120))
        for k in range(16)
    ]
    assert _text_area(quality_stage, caption) > THRESHOLDS.text_max_area
    still = np.ascontiguousarray(wide_street[:, 45:765])
    scrolling = [_lettered(still, "HOTEL CENTRAL", (140 + PAN * k, 120)) for k in range(16)]
    assert _text_area(quality_stage, scrolling) > THRESHOLDS.text_max_area
