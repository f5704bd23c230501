"""How alike two small pictures are, and whether one is blank: the measures the cut, black-run
and blend rules share (BGR pictures at detection size, `Frame.small`)."""

from __future__ import annotations

import cv2
import numpy as np


def content_difference(a: np.ndarray, b: np.ndarray) -> float:
    """The content detector's score between two BGR pictures: the mean absolute difference of
    hue, saturation and value, averaged (PySceneDetect's default weights)."""
    planes = zip(
        cv2.split(cv2.cvtColor(a, cv2.COLOR_BGR2HSV)), cv2.split(cv2.cvtColor(b, cv2.COLOR_BGR2HSV))
    )
    return sum(float(cv2.absdiff(x, y).mean()) for x, y in planes) / 3.0


def edge_likeness(a: np.ndarray, b: np.ndarray) -> float:
    """Correlation (-1 to 1) of two BGR pictures' edge strengths at 64x36: a picture recoloured
    or inverted keeps its edges (0.3 to 1 on the test films), another shot's are unrelated
    (0 to 0.13 across the cuts measured, docs/scenes.md)."""
    strengths = []
    for picture in (a, b):
        grey = cv2.resize(
            cv2.cvtColor(picture, cv2.COLOR_BGR2GRAY), (64, 36), interpolation=cv2.INTER_AREA
        )
        grey = grey.astype(np.float32)
        edges = cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
        strengths.append(edges.ravel() - edges.mean())
    x, y = strengths
    scale = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / scale if scale > 0 else 0.0


def grey_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute grey-level difference of two BGR pictures."""
    grey_a, grey_b = (cv2.cvtColor(p, cv2.COLOR_BGR2GRAY) for p in (a, b))
    return float(cv2.absdiff(grey_a, grey_b).mean())


def is_black_grey(grey: np.ndarray, luma: float) -> bool:
    """At most 1 % of the pixels brighter than `luma` (the 99th percentile, without sorting)."""
    return int(np.count_nonzero(grey > luma)) <= 0.01 * grey.size


def colour_histogram(image: np.ndarray) -> np.ndarray:
    """A picture's 4x4x4 colour histogram, as shares of its pixels."""
    counts = cv2.calcHist([image], [0, 1, 2], None, [4, 4, 4], [0, 256] * 3).ravel()
    return counts / counts.sum()


def colour_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance (0-1) of two pictures' 4x4x4 colour histograms."""
    return histogram_distance(colour_histogram(a), colour_histogram(b))


def histogram_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total-variation distance (0-1) of two `colour_histogram`s."""
    return 0.5 * float(np.abs(a - b).sum())
