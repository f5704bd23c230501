"""Text lines as the overlay passes see them (stages/burned_in/overlays.py, stages/burned_in/edge_text.py): the text
detector's map turned into line boxes at a chosen scale, and the rule for a line that looks like
an overlay's (a subtitle's, a note's) rather than the picture's."""

from __future__ import annotations

import cv2
import numpy as np

from stages.burned_in.text_detector import TextDetector

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)


def text_lines(detector: TextDetector, grey: np.ndarray, scale: float) -> list[Box]:
    """The text lines the detector finds in a grey picture shrunk by `scale`, as boxes in the
    picture's pixels: each blob of the probability map, grown back by DB's unclip rule (the
    network marks a shrunk kernel of each line), then the blobs of one line joined. The shrunk
    picture is padded (not stretched) to the multiples of 32 the network needs, so a thin band
    keeps its scale."""
    height, width = grey.shape
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    small = cv2.resize(grey, size, interpolation=interpolation)
    padded = cv2.copyMakeBorder(
        small, 0, -size[1] % 32, 0, -size[0] % 32, cv2.BORDER_CONSTANT, value=16
    )
    probability = detector.grey_map(padded)
    sx, sy = width / size[0], height / size[1]
    count, _, stats, _ = cv2.connectedComponentsWithStats(
        (probability > detector.threshold).astype(np.uint8), connectivity=8
    )
    boxes = []
    for x, y, w, h, area in stats[1:count]:
        if area < 3:
            continue
        grow = area * 1.5 / (2 * (w + h))  # DB's unclip distance for a ratio of 1.5
        x0, x1 = (x - grow) * sx, (x + w + grow) * sx
        y0, y1 = (y - grow) * sy, (y + h + grow) * sy
        box = (max(0, int(x0)), max(0, int(y0)), min(width, int(x1 + 1)), min(height, int(y1 + 1)))
        if box[2] > box[0] and box[3] > box[1]:  # not wholly in the padding
            boxes.append(box)
    return join_lines(boxes)


def join_lines(boxes: list[Box]) -> list[Box]:
    """Boxes that share most of their rows and lie within two heights of each other side by side
    are one line (Latin words come out of the detector one by one)."""
    lines: list[list[int]] = []
    for x0, y0, x1, y1 in sorted(boxes):
        for line in lines:
            overlap = min(y1, line[3]) - max(y0, line[1])
            height = max(y1 - y0, line[3] - line[1])
            if overlap > 0.5 * min(y1 - y0, line[3] - line[1]) and x0 - line[2] < 2 * height:
                line[:] = [min(x0, line[0]), min(y0, line[1]), max(x1, line[2]), max(y1, line[3])]
                break
        else:
            lines.append([x0, y0, x1, y1])
    return [tuple(line) for line in lines]  # type: ignore[misc]


def subtitle_like(box: Box, middle: tuple[float, float], others: list[Box]) -> bool:
    """A line of overlay text: at least as wide as tall, and centred (its middle within
    `middle`'s reach of its column: (column, reach); subtitles and notes are centred) or holding
    still across the sampled frames (IoU 0.9 with a line of another one, `others`: the
    overlay's own timing, not the picture's; cosmos-curate's artificial-text rule)."""
    x0, y0, x1, y1 = box
    if x1 - x0 < y1 - y0:
        return False
    column, reach = middle
    return abs((x0 + x1) / 2 - column) <= reach or any(iou(box, o) >= 0.9 for o in others)


def iou(a: Box, b: Box) -> float:
    inner = inner_area(a, b)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inner
    return inner / union if union else 0.0


def rows_overlap(box: Box, band: tuple[int, int]) -> float:
    """Share of the box's rows inside the band (rows y0, y1): a line more than half inside a
    subtitle band is the band's."""
    height = max(1, box[3] - box[1])
    return max(0, min(box[3], band[1]) - max(box[1], band[0])) / height


def inner_area(a: Box, b: Box) -> int:
    """The pixels two boxes share."""
    return max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
