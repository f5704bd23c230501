"""The global motion of each frame pair of a clip, for camera motion (stages/scoring/camera.py):
a similarity (translation, zoom, rotation) fitted robustly on the motion stage's flow at the
textured grid points, how the picture's halves part (the zoom question), and, where the flow
explains little of the picture, one shift of the whole picture by phase correlation (a whip
pan). docs/scores.md has the reasons and the figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np

from core.frames import hann_window
from stages.motion import UNIT_HEIGHT, UNIT_WIDTH

if TYPE_CHECKING:  # the settings' type only: stages/scoring/camera.py imports this module
    from stages.scoring.camera import CameraConfig


@dataclass(frozen=True)
class PairMotion:
    """The global motion of one frame pair: translation (px per frame at 480x720), zoom (scale
    change per frame), rotation (radians per frame), and the share of points it explains;
    `drift`: the robust translation of its points whichever motion was kept (a pan slower than
    the flow's tolerance is kept as no motion, but its drift still points the pan's way)."""

    tx: float
    ty: float
    zoom: float
    rotation: float
    fit: float
    drift: tuple[float, float] = (0.0, 0.0)


# ----------------------------------------------------------------------------- the fit


def fit_pairs(
    flows: list[tuple[np.ndarray, np.ndarray]], greys: list[np.ndarray], config: CameraConfig
) -> list[PairMotion | None]:
    """The similarity motion of each pair's flow (480x720 px units, all at one working size),
    fitted on the textured grid points of its first frame (`greys`, at that size); None for a
    pair with too few textured points. The pairs are fitted together, as arrays: a pair at a
    time costs ten times more in numpy's per-call overhead."""
    if not flows:
        return []
    px, py, u, v, textured = _grid_points(flows, greys, config)
    counts = np.maximum(textured.sum(axis=1), 1)

    def share(explained: np.ndarray) -> np.ndarray:
        return (explained & textured).sum(axis=1) / counts

    # Three motions, simplest first: none, a translation (robust: the largest layer of a
    # layered picture), a similarity. The simplest that explains nearly as many points as the
    # best is kept: a still background behind moving characters is a still camera, and a pan
    # over parallax layers is a pan, not a similarity pulled between the layers.
    similarity, explained = _robust_similarity(px, py, u, v, textured)
    shift = _robust_translation(u, v, textured)
    candidates = [
        (np.zeros_like(similarity), share(_explains(0.0, 0.0, u, v))),
        (
            np.concatenate([shift, np.zeros_like(shift)], axis=1),
            share(_explains(shift[:, 0:1], shift[:, 1:2], u, v)),
        ),
        (similarity, share(explained)),
    ]
    best = np.max([fit for _, fit in candidates], axis=0)
    params, fits = similarity.copy(), best.copy()
    chosen = np.zeros(len(u), bool)
    for motion, fit in candidates:
        take = ~chosen & (fit >= best - config.simpler_margin)
        params[take], fits[take] = motion[take], fit[take]
        chosen |= take
    return [
        PairMotion(
            float(p[0]), float(p[1]), float(p[2]), float(p[3]), float(f), (float(dx), float(dy))
        )
        if n >= config.min_points
        else None
        for p, f, n, (dx, dy) in zip(params, fits, counts, shift)
    ]


def _grid_points(flows, greys, config: CameraConfig):
    """The flow of each pair at the grid points (480x720 px units): point positions px, py about
    the picture's centre, flows u, v (pairs x points), and which points have texture."""
    height, width = flows[0][0].shape
    step = config.grid_step
    ys, xs = np.mgrid[step // 2 : height - 1 : step, step // 2 : width - 1 : step]
    ys, xs = ys.ravel(), xs.ravel()
    picture = np.stack(greys).astype(np.float32)
    # central differences at the grid points only (a whole Sobel image costs more)
    gx = picture[:, ys, xs + 1] - picture[:, ys, xs - 1]
    gy = picture[:, ys + 1, xs] - picture[:, ys - 1, xs]
    textured = np.hypot(gx, gy) >= 2 * config.min_texture
    u = np.stack([flow_x[ys, xs] for flow_x, _ in flows]).astype(np.float64)
    v = np.stack([flow_y[ys, xs] for _, flow_y in flows]).astype(np.float64)
    px = (xs + 0.5) * (UNIT_WIDTH / width) - UNIT_WIDTH / 2
    py = (ys + 0.5) * (UNIT_HEIGHT / height) - UNIT_HEIGHT / 2
    return px, py, u, v, textured


def part_expansions(
    flows: list[tuple[np.ndarray, np.ndarray]], greys: list[np.ndarray], config: CameraConfig
) -> np.ndarray:
    """Per pair, how the picture's halves part: (ex, ey), the scale change per frame along x
    (the right half's median flow against the left half's, over the distance between them) and
    along y (the lower half's against the upper). A zoom parts both ways alike (push-in: both
    +); a pan parts neither, even where its flow scatters (blur, glow), and a pan over parallax
    or a perspective ground parts one way only: the nearer side moves more. NaN where a half
    has no texture to measure."""
    if not flows:
        return np.zeros((0, 2))
    px, py, u, v, textured = _grid_points(flows, greys, config)

    def parting(flow, position, low_side, high_side):
        low, high = textured & low_side, textured & high_side
        at = np.broadcast_to(position, flow.shape)
        gap = _median_of(at, high) - _median_of(at, low)
        rise = _median_of(flow, high) - _median_of(flow, low)
        counted = low.any(axis=1) & high.any(axis=1) & (gap > 0)
        # a half with no texture (a plain sky, a wall) measures nothing: not measured is not
        # "does not part", so it is NaN, and such a pair is left out of the zoom question
        return np.where(counted, rise / np.where(counted, gap, 1.0), np.nan)

    return np.stack([parting(u, px, px < 0, px > 0), parting(v, py, py < 0, py > 0)], axis=1)


def _robust_similarity(px, py, u, v, used, iterations: int = 4):
    """Per pair (rows of u, v, used): (tx, ty, a, b) of u = tx + a x - b y, v = ty + b x + a y
    over its `used` points, by Tukey-weighted least squares started from the median
    translation, and which points it explains (within 1.5 px and 10 % of the flow's size,
    at 480x720)."""
    ones, zeros = np.ones_like(px), np.zeros_like(px)
    # (2N, 4): the x equations of every point, then their y equations
    design = np.concatenate(
        [np.stack([ones, zeros, px, -py], axis=1), np.stack([zeros, ones, py, px], axis=1)]
    )
    flow = np.concatenate([u, v], axis=1)  # (P, 2N), in the design's order
    params = np.zeros((len(u), 4))
    params[:, 0], params[:, 1] = _median_of(u, used), _median_of(v, used)
    for _ in range(iterations):
        residual = _residuals(design, flow, params)
        scale = np.maximum(1.0, 1.4826 * _median_of(residual, used))[:, None]
        weight = np.clip(1.0 - (residual / (4.685 * scale)) ** 2, 0.0, None) ** 2 * used
        weights = np.concatenate([weight, weight], axis=1)
        normal = (weights[:, :, None] * design).transpose(0, 2, 1) @ design
        right = (weights * flow) @ design
        solvable = np.abs(np.linalg.det(normal)) > 1e-9
        if not solvable.any():
            break
        params[solvable] = np.linalg.solve(normal[solvable], right[solvable][..., None])[..., 0]
    model = params @ design.T
    half = model.shape[1] // 2
    return params, _explains(model[:, :half], model[:, half:], u, v)


def _robust_translation(u, v, used, iterations: int = 4) -> np.ndarray:
    """Per pair: the (tx, ty) most of its used points share, by Tukey-weighted means started
    from the median."""
    shift = np.stack([_median_of(u, used), _median_of(v, used)], axis=1)
    for _ in range(iterations):
        residual = np.hypot(u - shift[:, 0:1], v - shift[:, 1:2])
        scale = np.maximum(1.0, 1.4826 * _median_of(residual, used))[:, None]
        weight = np.clip(1.0 - (residual / (4.685 * scale)) ** 2, 0.0, None) ** 2 * used
        total = weight.sum(axis=1)
        kept = total > 0
        shift[kept, 0] = (weight * u).sum(axis=1)[kept] / total[kept]
        shift[kept, 1] = (weight * v).sum(axis=1)[kept] / total[kept]
    return shift


def _explains(model_u, model_v, u, v) -> np.ndarray:
    """Which points a motion explains: within 1.5 px (at 480x720) and 10 % of their flow."""
    return np.hypot(model_u - u, model_v - v) <= 1.5 + 0.1 * np.hypot(u, v)


def _median_of(values: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Per row, the median of its used values (0 where none is used)."""
    ordered = np.sort(np.where(used, values, np.inf), axis=1)
    counts = used.sum(axis=1)
    middle = ordered[np.arange(len(values)), np.maximum(counts - 1, 0) // 2]
    return np.where(counts > 0, middle, 0.0)


def _residuals(design: np.ndarray, flow: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Per pair and point: how far the flow is from the motion `params` gives (480x720 px)."""
    error = params @ design.T - flow
    half = error.shape[1] // 2
    return np.hypot(error[:, :half], error[:, half:])


# ----------------------------------------------------------------------------- phase correlation


def steady_light(a: np.ndarray, b: np.ndarray, max_change: float) -> bool:
    """The pair keeps its brightness: its mean grey changes by at most `max_change` of the
    brighter frame's (and 2 levels). A fade or a flash changes every pixel; the flow reads
    part of that as motion, and the picture fading out of black has too little to follow."""
    mean_a, mean_b = float(a.mean()), float(b.mean())
    change = abs(mean_a - mean_b)
    return change <= 2.0 or change <= max_change * max(mean_a, mean_b)


def coarse_or_flow(
    pair: PairMotion | None, a: np.ndarray, b: np.ndarray, config: CameraConfig
) -> PairMotion | None:
    """The pair's motion from the flow, or, where the flow explains little of the picture (a
    whip pan blurs the drawing, and a move of tens of pixels a frame is beyond DIS at its
    working size), the whole picture's translation by phase correlation, when shifting the
    first frame by it matches the second far better than leaving it."""
    if pair is not None and pair.fit >= config.coarse_below_fit:
        return pair
    coarse = coarse_translation(a, b, config)
    return coarse if coarse is not None else pair


def coarse_translation(a: np.ndarray, b: np.ndarray, config: CameraConfig) -> PairMotion | None:
    """The translation of grey frame `a` to `b` by phase correlation (px per frame at 480x720),
    or None when its peak is weak or shifting `a` by it does not take at least `coarse_gain` of
    the pair's difference away. Measured at half the flow's size (a whip pan's tens of pixels
    need no finer grid, and it costs half as much). `fit`: the share of the overlap the shift
    matches within 12 grey levels."""
    height, width = a.shape[0] // 2, a.shape[1] // 2
    first, second = (
        cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA).astype(np.float32)
        for frame in (a, b)
    )
    # phaseCorrelate weighs float32 inputs by the window in place: it gets copies
    (dx, dy), response = cv2.phaseCorrelate(first.copy(), second.copy(), hann_window(height, width))
    if response < config.coarse_response or abs(dx) >= width / 2 or abs(dy) >= height / 2:
        return None
    moved = cv2.warpAffine(first, np.array([[1, 0, dx], [0, 1, dy]], np.float32), (width, height))
    x0, x1 = int(np.ceil(max(0.0, dx))) + 1, width - int(np.ceil(max(0.0, -dx))) - 1
    y0, y1 = int(np.ceil(max(0.0, dy))) + 1, height - int(np.ceil(max(0.0, -dy))) - 1
    if x1 - x0 < width // 4 or y1 - y0 < height // 4:
        return None
    after = np.abs(moved[y0:y1, x0:x1] - second[y0:y1, x0:x1])
    before = float(np.abs(first[y0:y1, x0:x1] - second[y0:y1, x0:x1]).mean())
    if float(after.mean()) > (1 - config.coarse_gain) * before:
        return None
    tx, ty = dx * UNIT_WIDTH / width, dy * UNIT_HEIGHT / height
    return PairMotion(tx, ty, 0.0, 0.0, float((after <= 12).mean()), (tx, ty))
