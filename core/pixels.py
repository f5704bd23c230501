"""The shape of a film's pixels: stored pixels that are not square (anamorphic DVDs, PAL and NTSC
captures) and the picture they show.

A sample aspect ratio (SAR) is the width over the height of one stored pixel: 720x480 pixels of
SAR 32:27 show a 16:9 picture, 853x480 in square pixels. Geometry is planned in display terms
(what a viewer sees) and cut in stored pixels (what the decoder gives).
"""

from __future__ import annotations

from fractions import Fraction


def parse_sar(sar: str | None) -> Fraction:
    """The SAR "32:27" as a Fraction; square (1) when not recorded."""
    if not sar:
        return Fraction(1)
    num, den = (int(v) for v in sar.split(":"))
    return Fraction(num, den)


def pixel_aspect(sar: str | None, rotation: int | None = 0) -> float:
    """Width over height of one pixel of the upright picture: the SAR, turned with the picture
    (a stored pixel 32:27 wide stands 27:32 once a 90-degree rotation is applied)."""
    ratio = parse_sar(sar)
    return float(1 / ratio if (rotation or 0) % 180 == 90 else ratio)


def shown_size(width: int, height: int, aspect: float) -> tuple[int, int]:
    """The size the picture is shown at in square pixels: its rows kept, its width scaled."""
    return int(round(width * aspect)), height


def shape_words(width: int, height: int, sar: str | None, rotation: int | None = 0) -> str:
    """`anamorphic 720x480 SAR 32:27, shown as 853x480` for pixels that are not square, else
    empty: the console line's, summary.json's and the report's words. Editors and phone apps
    write SARs such as 2664:2665 that show the picture at its stored size: to the pixel those
    are square, and naming them anamorphic would send a user looking for a squeeze there is not."""
    aspect = pixel_aspect(sar, rotation)
    shown_w, shown_h = shown_size(width, height, aspect)
    if (shown_w, shown_h) == (width, height):
        return ""
    return f"anamorphic {width}x{height} SAR {sar}, shown as {shown_w}x{shown_h}"
