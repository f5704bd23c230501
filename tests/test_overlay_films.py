"""The labelled overlay films (tests/overlay_films.py) keep the promises the overlay tests rely on:
real fonts, sizes from 12 pixels, subtitles on their own timing, labels that match the pixels."""

from __future__ import annotations

import av
import numpy as np
import pytest
from overlay_films import IN_WORLD, LOGO, SUBTITLE, font_path


def decoded(film, indices) -> dict[int, np.ndarray]:
    with av.open(str(film.path)) as container:
        frames = container.decode(video=0)
        return {i: f.to_ndarray(format="rgb24") for i, f in enumerate(frames) if i in indices}


@pytest.mark.parametrize("kind", ["latin", "latin_bold", "cjk"])
def test_the_fonts_are_installed(kind):
    assert font_path(kind).is_file()


def test_subtitles_run_on_their_own_timing_in_several_sizes(wide_film, academy_film):
    for film in (wide_film, academy_film):
        shown = set(film.frames_with(SUBTITLE))
        assert 0.6 < len(shown) / film.num_frames < 0.95  # gaps between lines
        assert any(e.start < cut < e.stop for e in film.subtitles for cut in film.cuts)
        heights = {film.boxes(SUBTITLE, i)[0][3] for i in shown}
        assert min(heights) in range(12, 16) and len(heights) >= 4
    tops = [i for i in wide_film.frames_with(SUBTITLE) if wide_film.boxes(SUBTITLE, i)[0][1] < 50]
    assert tops  # a translator's note at the top
    assert {e.script for e in wide_film.subtitles} == {"latin", "cjk"}
    assert max(len(e.lines) for e in wide_film.subtitles) == 2


def test_overlays_hold_still_while_in_world_text_moves_with_the_picture(wide_film, signs_film):
    assert wide_film.frames_with(LOGO) == list(range(wide_film.num_frames))
    assert len({wide_film.boxes(LOGO, i)[0] for i in range(wide_film.num_frames)}) == 1
    for film in (wide_film, signs_film):
        signs = film.frames_with(IN_WORLD)
        assert signs
        lefts = [film.boxes(IN_WORLD, i)[0][0] for i in signs]
        assert len(set(lefts)) > len(lefts) // 2  # it moves
    assert not signs_film.frames_with(SUBTITLE) and not signs_film.frames_with(LOGO)


def test_labels_mark_the_drawn_pixels(academy_film):
    """Inside a subtitle's box there are the text's bright pixels and its black outline; the
    same rows of a frame between two lines hold neither pattern as densely."""
    with_text = academy_film.frames_with(SUBTITLE)[5]
    without = min(set(range(academy_film.num_frames)) - set(academy_film.frames_with(SUBTITLE)))
    frames = decoded(academy_film, {with_text, without})
    x, y, w, h = academy_film.boxes(SUBTITLE, with_text)[0]

    def contrast(frame):
        grey = frame[y : y + h, x : x + w].mean(axis=2)
        return ((grey > 200).mean(), (grey < 40).mean())

    bright, dark = contrast(frames[with_text])
    assert bright > 0.08 and dark > 0.08
    assert min(contrast(frames[without])) < 0.02


def test_truth_is_a_band_per_position_and_the_logo(wide_film, academy_film):
    truth = academy_film.overlay_truth()
    [(top, bottom)] = truth["subtitle_bands"]
    assert top >= 320 and bottom <= academy_film.height  # below the 480x320 window at y 0
    assert truth["logos"] == []
    wide = wide_film.overlay_truth()
    assert len(wide["subtitle_bands"]) == 2 and len(wide["logos"]) == 1
