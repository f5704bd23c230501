"""Camera motion of a clip (issue 36): the global move of the picture, fitted on the flow the
motion stage already measured (no second flow, no weights).

The rule (docs/scores.md has the reasons and the figures):
1. Each moving pair's flow (held drawings left out, as for motion scope; pairs whose light
   changes, fades and flashes, too) is sampled on a grid, at the points where the picture has
   texture to follow (flat paint gives DIS nothing to match, and its flow there says nothing
   about the camera).
2. A similarity motion is fitted to those points, robustly (iteratively reweighted least
   squares from the median, Tukey weights): translation (tx, ty), zoom and rotation, about the
   picture's centre. The background is most of the picture, so characters moving over it are
   outliers; `fit` is the share of points the motion explains. A pair the flow explains poorly
   is measured again as one shift of the whole picture (phase correlation: a whip pan).
3. The clip's motion is the median of its pairs', translation in pixels per frame of a 480x720
   picture, zoom and rotation per second (the clip's frame rate); where the pairs' drifts or
   the picture's parting named the move instead, the stored values are those. Labels, in the film
   convention (the camera's move, the opposite of the picture's): `pan_left` (the picture slides
   right), `pan_right`, `tilt_up` (the picture slides down), `tilt_down`, `zoom_in` (it grows),
   `zoom_out`, `static` (no move above the thresholds, a motion that explains too little of
   the picture to be the camera's: effects, characters, or a picture mostly too flat to
   measure), `complex` (the pairs disagree about a clear move, or it pans and zooms at once
   with neither the larger; pairs that disagree about a motion barely above the thresholds,
   or a shake that nets little with small jolts, are static). A clip under the thresholds
   whose pairs drift one way
   over the clip is a slow pan; a clip whose flow no motion fits (a blurred, glowing or hazy
   picture) but whose pairs nearly all drift one way faster than the pan threshold, and clearly
   over the clip, is a pan.
   A diagonal is named by its larger axis, or `complex` when neither axis clearly dominates;
   a pan and a zoom seen at once are named by the larger. A slow pan counts as a move when it
   carries the picture 12 px over the clip, a zoom when it carries a typical point 24 px
   (about 8 %: the labelling conventions' amounts), and
   a picture whose motion fits and turns by more than 3 degrees over the clip is `complex` (a
   roll), whatever else it does. A clip still for most of its pairs
   whose other pairs (a third or more) move clearly and carry the picture far, mostly one way
   (first frame against last), pans or tilts that way.
4. A zoom must part the picture's halves both ways alike (left from right and top from
   bottom): a similarity's zoom they do not show is a pan's parallax, and a picture no motion
   fits, or a clip otherwise still, whose halves part alike pair after pair zooms (a slow zoom
   moves each point within a pair's tolerance of no motion, as a slow pan does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from core.frames import ClipFrames
from core.record import Clip
from core.resources import Resources
from core.schema import CLIP_SCHEMA
from core.settings import ConfigError, Settings
from stages.base import ClipStage, register_clip_stage
from stages.motion import (
    FLOW_MEMO,
    UNIT_HEIGHT,
    UNIT_WIDTH,
    DisFlow,
    MotionConfig,
    PairFlows,
    pair_flows,
)
from stages.scoring.camera_fit import (
    PairMotion,
    coarse_or_flow,
    fit_pairs,
    part_expansions,
    steady_light,
)
from stages.scoring.scores import Score

STATIC, COMPLEX = "static", "complex"
PAN_LEFT, PAN_RIGHT, TILT_UP, TILT_DOWN = "pan_left", "pan_right", "tilt_up", "tilt_down"
PANS = (PAN_LEFT, PAN_RIGHT, TILT_UP, TILT_DOWN)
ZOOM_IN, ZOOM_OUT = "zoom_in", "zoom_out"
LABELS = (STATIC, *PANS, ZOOM_IN, ZOOM_OUT, COMPLEX)
REACH = 0.5 * float(np.hypot(UNIT_HEIGHT, UNIT_WIDTH)) / np.sqrt(2)  # a typical point's radius


@dataclass
class CameraConfig(Settings):
    enabled: bool = True
    """Label each clip's camera motion from the motion stage's flow (no weights; when the motion
    stage is off, DIS flow is measured here)."""
    grid_step: int = 6
    """The flow is sampled every this many pixels of its working size (120x180 for DIS)."""
    min_texture: float = 3.0
    """A point takes part when its grey level changes by at least this much a pixel (0-255 grey
    at the flow's size, central differences): flat paint has no flow to trust."""
    min_points: int = 40
    """Fewer textured points than this in a pair: the pair says nothing (a flat or dark frame)."""
    static_speed: float = 1.5
    """Pans and tilts: the picture moves more than this many pixels per frame (480x720)."""
    static_zoom: float = 0.02
    """Zooms: the picture's scale changes by more than this share per second."""
    min_fit: float = 0.3
    """A moving clip whose motion explains less than this share of its textured points is
    `static`: what moves is effects or characters, not the camera (no clip spans a transition
    the scene detector finds)."""
    simpler_margin: float = 0.1
    """A simpler motion (none, then a translation, then a similarity) is kept when it explains
    at most this share of the points fewer than the best."""
    min_agreement: float = 0.6
    """A moving clip is `complex` unless this share of its moving pairs moves as its label says."""
    complex_margin: float = 2.0
    """... and only when it moves at least this many times the static thresholds: pairs that
    disagree about a motion barely above them are a shake or a character, not a camera move."""
    min_measured: float = 0.5
    """A clip is `static` unless at least this share of its steadily lit moving pairs has
    texture enough to measure (a picture mostly out of black, a slide-in, says nothing)."""
    slow_speed: float = 0.75
    """A clip under `static_speed` whose pairs drift the same way at least this many pixels a
    frame (480x720), together, is a slow pan or tilt (on a 2 s clip of 16 frames
    `slow_travel` asks 0.8; this one guards where a few pairs carry the sum)."""
    slow_travel: float = 12.0
    """... and whose pairs' drifts add up to at least this many pixels over the clip, as the
    labelling conventions measure a move (a creep under it is no move; a clip whose pairs are
    mostly held or relit has too few to show a slow pan)."""
    zoom_travel: float = 24.0
    """A zoom, whether the similarity fits it (step 7) or the picture's parting shows it (step
    10), must move a typical point (`REACH` from the middle) at least this many pixels over the
    clip: about 8 % of scale, the labelling conventions' amount of a zoom. Every labeller of
    every labelled set called the zooms the rule measures at 4-7.3 % `static` (docs/scores.md,
    after round 8); 12 gives back the 4 % asked before it."""
    slow_agreement: float = 0.8
    """... when at least this share of all its pairs drifts as its label says."""
    slow_min_fit: float = 0.5
    """... counting only the pairs whose motion explains at least this share of their points
    (and at least half the pairs must)."""
    max_light_change: float = 0.1
    """A pair whose mean brightness changes by more than this share (a fade, a flash) is left
    out: its flow reads the change of light as motion."""
    coarse_below_fit: float = 0.5
    """A pair whose flow motion explains less than this share of its points is measured again by
    phase correlation of its grey frames (a whip pan, blurred, beyond the flow's reach)."""
    coarse_response: float = 0.3
    """... whose peak must reach this height (0-1: one clean shift of the whole picture is 1)."""
    coarse_gain: float = 0.33
    """... and whose shift must take at least this share of the pair's grey difference away."""
    diagonal_ratio: float = 1.2
    """A clear move names a pan or tilt by its larger axis when that axis is at least this many
    times the smaller; a diagonal closer to 45 degrees is `complex` (it is neither)."""
    pan_zoom_ratio: float = 1.0
    """A pan and a zoom seen at once (the zoom measured by how far it moves a typical point) are
    named by the larger when it is at least this many times the other; closer, `complex`. 1
    names the larger always: a pan with a smaller zoom is a pan, as a viewer names it."""
    short_share: float = 1 / 3
    """A clip still by its median is a pan or tilt when at least this share of its pairs moves
    clearly (`complex_margin` times the pan threshold, their motion explaining `slow_min_fit` of
    their points) and most of the others are seen to hold (their motion explains `min_fit` of
    their points): a camera that moves for part of the clip."""
    short_travel: float = 40.0
    """... and those pairs carry the picture at least this many pixels (480x720) together."""
    short_straightness: float = 0.7
    """... in one way: their net travel (first frame against last) is at least this share of the
    path they take (a move that turns as it goes still counts; a shake back and forth nets
    nothing). The clip is named by that net travel."""
    roll_degrees: float = 3.0
    """A clip whose picture turns by more than this many degrees over the clip (the median moving
    pair's rotation times the moving pairs: held pairs turn none) is `complex`: a roll, with or
    without a pan or zoom. A pair's turn is measured only where the similarity is its kept
    motion, so a roll alone or over a pan is seen from about 4.5-5 degrees over a 2 s clip, a
    roll over a zoom from this threshold (docs/scores.md, step 12)."""
    shake_jolt: float = 20.0
    """Pairs that disagree about a clear move and net under `slow_travel` are a shake: `static`
    while no pair jolts this many pixels (480x720; a third of the 60 px labelling grid's
    cell), else `complex` (labelling conventions, 7)."""
    part_balance: float = 0.5
    """A zoom parts the picture's halves both ways alike: the smaller of the left-right and the
    top-bottom parting must be at least this share of the larger (a pan over parallax or a
    perspective ground parts one way only)."""

    def validate(self) -> None:
        if self.grid_step < 1:
            raise ConfigError(f"camera.grid_step={self.grid_step}: give 1 or more")
        shares = ("min_fit", "min_agreement", "part_balance", "short_share", "short_straightness")
        for name in shares:
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"camera.{name}={getattr(self, name)}: give a share, 0-1")
        for name in ("diagonal_ratio", "pan_zoom_ratio"):
            if getattr(self, name) < 1:
                raise ConfigError(f"camera.{name}={getattr(self, name)}: give 1 or more")
        if self.roll_degrees < 0:
            raise ConfigError(f"camera.roll_degrees={self.roll_degrees}: give 0 or more")
        for name in ("short_travel", "slow_travel", "zoom_travel", "shake_jolt"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"camera.{name}={getattr(self, name)}: give more than 0 px")


@dataclass(frozen=True)
class CameraMotion:
    label: str
    # the motion the label was named by: the median moving pair's, or where a later step named
    # the move (a slow, unfit or short pan; a zoom read from the picture's parting), that step's
    tx: float  # px per frame at 480x720 (+: content slides right)
    ty: float  # (+: content slides down)
    zoom: float  # scale change per second (+: the picture grows, the camera zooms in)
    rotation: float  # radians per second
    fit: float  # mean share of textured points the motion explains
    pairs: int  # pairs with a motion (moving and textured)


class Named(NamedTuple):
    """A label and the motion a frame it was named by (translation in px, zoom as a share)."""

    label: str
    tx: float
    ty: float
    zoom: float


class ClipSpan(NamedTuple):
    """How much of the clip its measured pairs stand for."""

    share: float  # the moving pairs' share of `counted`: held pairs moved none
    counted: int  # the clip's pairs, less relit ones (they count on neither side)
    fps: float


# ----------------------------------------------------------------------------- the label


def camera_motion(measured: PairFlows, grey: list[np.ndarray], fps: float, config: CameraConfig):
    """The clip's camera motion from the motion stage's flow of its pairs and its grey frames at
    the flow's size."""
    moving = list(measured.flows)
    lit = [i for i in moving if steady_light(grey[i], grey[i + 1], config.max_light_change)]
    fitted = fit_pairs([measured.flows[i] for i in lit], [grey[i] for i in lit], config)
    remeasured = [
        coarse_or_flow(pair, grey[i], grey[i + 1], config) for pair, i in zip(fitted, lit)
    ]
    kept = [i for pair, i in zip(remeasured, lit) if pair is not None]
    pairs = [pair for pair in remeasured if pair is not None]
    if not pairs:  # every pair held, relit or flat: no move can be seen
        return CameraMotion(STATIC, 0.0, 0.0, 0.0, 0.0, 1.0, 0)
    # a held pair's picture did not move: the clip's motion per frame is its moving pairs'
    # times their share (a pan on threes moves three frames' worth once every three frames);
    # a relit pair (a fade, a flash) says nothing either way and counts on neither side
    counted = len(measured.held) - (len(moving) - len(lit))
    span = ClipSpan(len(lit) / counted, counted, fps)
    tx, ty, zoom, rotation = (
        span.share * float(np.median([getattr(p, name) for p in pairs]))
        for name in ("tx", "ty", "zoom", "rotation")
    )
    fit = float(np.mean([p.fit for p in pairs]))
    if len(pairs) < config.min_measured * len(lit):  # most of the picture too flat to follow
        return CameraMotion(STATIC, tx, ty, zoom * fps, rotation * fps, fit, len(pairs))
    motion = (tx, ty, zoom, rotation)
    named = _moved_label(pairs, motion, fit, span, config)
    if _zoom_in_question(named, zoom, fit, span, config):
        parts = part_expansions([measured.flows[i] for i in kept], [grey[i] for i in kept], config)
        named = _zoom_by_parts(named, parts, pairs, motion, fit, span, config)
    label, tx, ty, zoom = named
    if _rolls(rotation * counted, fit, config):
        label, tx, ty, zoom = COMPLEX, *motion[:3]
    return CameraMotion(label, tx, ty, zoom * fps, rotation * fps, fit, len(pairs))


def _rolls(turned: float, fit: float, config: CameraConfig) -> bool:
    """A roll: the picture turns by more than `roll_degrees` over the clip (`turned`, radians:
    the median moving pair's rotation times the moving pairs), where a motion fits the picture.
    It is `complex` whatever else the clip does (labelling conventions, 8)."""
    return fit >= config.min_fit and abs(np.degrees(turned)) > config.roll_degrees


def _moved_label(pairs, motion, fit, span: ClipSpan, config: CameraConfig) -> Named:
    """The label of the clip's median motion (tx, ty, zoom, rotation a frame), and where that is
    still, of its slow, unfit or short moves, in that order; with the motion that named it."""
    tx, ty, zoom, _ = motion
    label = _label(pairs, motion, fit, span, config)
    if label != STATIC:
        return Named(label, tx, ty, zoom)
    later = _slow_pan(pairs, span.share, config)
    if later is None and fit < config.min_fit:
        later = _unfit_pan(pairs, span.share, config)
    if later is None:
        later = _short_move(pairs, span.share, config)
    return later or Named(STATIC, tx, ty, zoom)


def _zoom_in_question(
    named: Named, zoom: float, fit: float, span: ClipSpan, config: CameraConfig
) -> bool:
    """Whether the picture's parts must settle a zoom: the similarity found one (a zoom, or a pan
    and a zoom at once), no motion fits the picture and its drifts alone decided, or the clip
    is still or pans slowly (a slow zoom is within each pair's tolerance of no motion; about a
    point off the centre it drifts as a slow pan does)."""
    if named.label in (ZOOM_IN, ZOOM_OUT, COMPLEX):
        return abs(zoom) * span.fps > config.static_zoom
    return _slow(named, config) or fit < config.min_fit


def _slow(named: Named, config: CameraConfig) -> bool:
    """Still, or a pan or tilt under the pan threshold (named by its drifts: step 8)."""
    if named.label in PANS:
        return bool(np.hypot(named.tx, named.ty) <= config.static_speed)
    return named.label == STATIC


def _zoom_by_parts(
    named: Named, parts: np.ndarray, pairs, motion, fit, span: ClipSpan, config: CameraConfig
) -> Named:
    """The label, with the motion behind it, once the picture's halves have been asked whether
    it zooms (part_expansions): a zoom parts them both ways alike, in the zoom's sense. Where
    the similarity found a zoom that most pairs' halves do not show (`min_agreement`), the zoom
    was a pan's parallax or a perspective ground, and the clip is labelled by its translation.
    Where no motion fits the picture (blur, glow), or the clip is still or pans slowly, nearly
    all pairs' halves (`slow_agreement`) must part alike beyond the zoom threshold, and the zoom
    must move the picture at least half as much as its drift (as far, `pan_zoom_ratio`, against
    a slow pan's: a pan and a zoom are named by the larger)."""
    tx, ty, zoom, rotation = motion
    share, fps = span.share, span.fps
    parts = parts[~np.isnan(parts).any(axis=1)]  # pairs whose halves were measured both ways
    if len(parts) < 2:
        return named
    parted = share * float(np.median(parts.mean(axis=1)))
    size = np.abs(parts)
    balanced = (np.sign(parts[:, 0]) == np.sign(parts[:, 1])) & (
        size.min(axis=1) >= config.part_balance * size.max(axis=1)
    )
    agree = float(np.mean(balanced & (np.sign(parts[:, 0]) == np.sign(parted))))
    if fit >= config.min_fit and not _slow(named, config):
        if agree >= config.min_agreement and np.sign(parted) == np.sign(zoom):
            return named
        return _moved_label(pairs, (tx, ty, 0.0, rotation), fit, span, config)
    drift = share * np.hypot(*np.median([p.drift for p in pairs], axis=0))
    slow_pan = fit >= config.min_fit and named.label != STATIC  # step 8's
    against = config.pan_zoom_ratio if slow_pan else 0.5
    zooms = abs(parted) * fps > config.static_zoom and abs(parted) * REACH >= against * drift
    zooms = zooms and _zoom_travels(abs(parted) * REACH, span, config)
    if zooms and agree >= config.slow_agreement:
        # the parting, not the similarity's zoom, named it (no motion fits, or the zoom is slow)
        return Named(ZOOM_IN if parted > 0 else ZOOM_OUT, named.tx, named.ty, parted)
    return named


def _slow_pan(pairs: list[PairMotion], share: float, config: CameraConfig) -> Named | None:
    """A clip under the pan threshold: still, unless its pairs drift the same way, together at
    least `slow_speed` a frame and `slow_travel` over the clip (a slow pan over a painted
    background, a pixel a frame, is within the flow's tolerance of no motion pair by pair, but
    adds up over the clip). Only pairs whose motion explains at least `slow_min_fit` of their
    points count: a character moving over a plain, dark background drifts too, and then little
    of the picture agrees."""
    voters = [p for p in pairs if p.fit >= config.slow_min_fit]
    if len(voters) < max(2, len(pairs) / 2):
        return None
    return _drift_pan(voters, pairs, share, config.slow_speed, config)


def _unfit_pan(pairs: list[PairMotion], share: float, config: CameraConfig) -> Named | None:
    """A clip whose motions explain almost none of its points (under `min_fit`): the flow of a
    blurred, glowing or hazy picture scatters beyond the 1.5 px a motion must match, so no
    motion is kept. The robust translation of every pair's points (its drift) still points where
    the picture goes: when nearly all pairs (`slow_agreement`) drift one way, faster than the
    pan threshold itself and far enough over the clip, the camera pans. Effects and characters
    that explain little of the picture drift this way and that, and stay static. The move must
    also be clear over the whole clip: the pairs' drifts added up (first frame against last)
    carry the picture, the way of the pan, at least `complex_margin` times the pan threshold a
    frame. Where no motion fits, a creep of a few pixels a frame is as often a hand or hair
    moving over a blur, or an edit's grading, as the camera."""
    if len(pairs) < 2:
        return None
    named = _drift_pan(pairs, pairs, share, config.static_speed, config)
    if named is None:
        return None
    speed = share * float(np.hypot(*_net_drift(pairs))) / len(pairs)
    return named if speed >= config.complex_margin * config.static_speed else None


def _drift_pan(voters, pairs, share: float, speed: float, config: CameraConfig) -> Named | None:
    """The pan or tilt the voters' median drift names (times the moving share), with that drift,
    when it reaches `speed` a frame, the pairs' drifts add up to `slow_travel` over the clip, and
    at least `slow_agreement` of all the pairs drift that way; else None (still)."""
    drift_x = share * float(np.median([p.drift[0] for p in voters]))
    drift_y = share * float(np.median([p.drift[1] for p in voters]))
    net_x, net_y = _net_drift(pairs)
    if np.hypot(drift_x, drift_y) < speed or np.hypot(net_x, net_y) < config.slow_travel:
        return None
    label = _pan_label(drift_x, drift_y)
    agree = [_pan_label(*p.drift) == label for p in pairs]  # the whole clip drifts one way
    # and first frame against last it went that way: one far-off pair must not carry the sum
    if np.mean(agree) < config.slow_agreement or _pan_label(net_x, net_y) != label:
        return None
    return Named(label, drift_x, drift_y, 0.0)


def _net_drift(pairs: list[PairMotion]) -> tuple[float, float]:
    """The pairs' drifts added up: how far the picture went over the clip, first frame against
    last (held pairs move none)."""
    return sum(p.drift[0] for p in pairs), sum(p.drift[1] for p in pairs)


def _net_motion(pairs: list[PairMotion]) -> tuple[float, float]:
    """The pairs' kept motions' translations added up (as `_net_drift`, for the motion a pair
    was explained by rather than its robust drift)."""
    return sum(p.tx for p in pairs), sum(p.ty for p in pairs)


def _short_move(pairs: list[PairMotion], share: float, config: CameraConfig) -> Named | None:
    """A clip its median calls still whose clearly moving pairs (`short_share` of them or more,
    each beyond `complex_margin` times the pan threshold and explaining `slow_min_fit` of its
    points) carry the picture `short_travel` one way, while most of its other pairs are seen to
    hold (their motion, none, explains `min_fit` of their points): the camera moves for part of
    the clip and holds (a tilt that settles on a face). The move is named as a viewer names it,
    by the clear pairs' net travel, first frame against last; it must be most of the path they
    take (`short_straightness`), so a move that turns as it goes (a slide that bends into a tilt)
    counts, and jolts this way and that (an edit's shake) net nothing. Where the rest of the
    pairs cannot be measured (flat sand, cuts the scene detector missed), the hold is not seen,
    and the clip stays still. A net travel with no dominant axis is `complex`, as in step 7.
    The motion behind it is that travel over the measured pairs, times the moving share."""
    moves = config.complex_margin * config.static_speed
    is_clear = [p.fit >= config.slow_min_fit and np.hypot(p.tx, p.ty) > moves for p in pairs]
    clear = [p for p, c in zip(pairs, is_clear) if c]
    held = sum(p.fit >= config.min_fit for p, c in zip(pairs, is_clear) if not c)
    if not clear or len(clear) < config.short_share * len(pairs):
        return None
    if held < 0.5 * (len(pairs) - len(clear)):
        return None
    net_x, net_y = _net_motion(clear)
    travel = float(np.hypot(net_x, net_y))
    path = sum(float(np.hypot(p.tx, p.ty)) for p in clear)
    if travel < config.short_travel or travel < config.short_straightness * path:
        return None
    way = COMPLEX if _no_dominant_axis(net_x, net_y, config) else _pan_label(net_x, net_y)
    return Named(way, share * net_x / len(pairs), share * net_y / len(pairs), 0.0)


def _zoom_travels(speed: float, span: ClipSpan, config: CameraConfig) -> bool:
    """Whether a zoom moving a typical point (`REACH` from the middle) `speed` px a frame carries
    it `zoom_travel` over the clip's counted pairs, first frame against last (24 px, about 8 %
    of scale)."""
    return speed * span.counted >= config.zoom_travel


def _label(pairs, motion, fit, span: ClipSpan, config: CameraConfig) -> str:
    # the turn is not asked here: a roll is step 12's (`_rolls`), over the clip, not a frame
    tx, ty, zoom, _ = motion
    speed = float(np.hypot(tx, ty))
    zoom_speed = abs(zoom) * REACH  # how far the zoom moves a typical point, px per frame
    moving_zoom = abs(zoom) * span.fps > config.static_zoom
    moving_zoom = moving_zoom and _zoom_travels(zoom_speed, span, config)
    if speed <= config.static_speed and not moving_zoom:
        return STATIC
    if fit < config.min_fit:
        return STATIC
    clear = max(speed, zoom_speed) > config.complex_margin * config.static_speed
    if moving_zoom and zoom_speed >= config.pan_zoom_ratio * speed:
        label = ZOOM_IN if zoom > 0 else ZOOM_OUT
        agree = [np.sign(p.zoom) == np.sign(zoom) for p in pairs]
    elif speed > config.static_speed:
        if moving_zoom and config.pan_zoom_ratio * zoom_speed > speed:
            return COMPLEX  # a pan and a zoom at once, neither clearly the larger
        if clear and _no_dominant_axis(tx, ty, config):
            return COMPLEX  # a diagonal with no dominant axis: neither a pan nor a tilt
        label = _pan_label(tx, ty)
        # a clear diagonal's pairs scatter about its direction, some past 45 degrees; a move
        # barely above the thresholds must agree pair by pair (else it is a shake: static)
        agree = [_goes_along(p.tx, p.ty, tx, ty, label, clear) for p in pairs]
    else:
        return STATIC  # a small zoom under the pan threshold with no pan
    if np.mean(agree) >= config.min_agreement:
        return label
    return COMPLEX if clear and not _shakes(pairs, config) else STATIC


def _shakes(pairs: list[PairMotion], config: CameraConfig) -> bool:
    """Pairs that disagree about a clear move are a shake, which the labelling conventions (7)
    call `static`, when they net under `slow_travel` over the clip (first frame against last)
    and no pair jolts `shake_jolt` or more; larger jolts are `complex`."""
    net = float(np.hypot(*_net_motion(pairs)))
    jolt = max(float(np.hypot(p.tx, p.ty)) for p in pairs)
    return net < config.slow_travel and jolt < config.shake_jolt


def _goes_along(pair_x, pair_y, tx, ty, label: str, clear: bool) -> bool:
    """Whether a pair moves as the clip's pan or tilt `label` (the clip moving by tx, ty): it
    names the same move, or, for a clear move, it goes within 45 degrees of the clip's way. A
    pair the flow saw no motion in names no way: it goes along a clear move (a camera that
    pauses within the shot) and along no move that is barely above the thresholds (before this
    test it read as `pan_right`, so mirror-image clips could be labelled differently)."""
    if pair_x == 0 and pair_y == 0:
        return clear
    if _pan_label(pair_x, pair_y) == label:
        return True
    along = pair_x * tx + pair_y * ty
    return clear and along >= np.cos(np.pi / 4) * np.hypot(pair_x, pair_y) * np.hypot(tx, ty)


def _no_dominant_axis(tx: float, ty: float, config: CameraConfig) -> bool:
    """A diagonal closer to 45 degrees than `diagonal_ratio`: neither a pan nor a tilt."""
    return max(abs(tx), abs(ty)) < config.diagonal_ratio * min(abs(tx), abs(ty))


def _pan_label(tx: float, ty: float) -> str:
    """The camera's move for content sliding by (tx, ty): the opposite way (film convention)."""
    if abs(tx) >= abs(ty):
        return PAN_LEFT if tx > 0 else PAN_RIGHT
    return TILT_UP if ty > 0 else TILT_DOWN


# ----------------------------------------------------------------------------- the stage


class CameraStage(ClipStage):
    """Fills camera_motion and the values behind it. Reads the flow the motion stage left on the
    clip's frames; measures DIS flow itself (the motion stage's defaults) when there is none."""

    name = "camera"
    resources = Resources(cpus=1.0)

    def __init__(self, config: CameraConfig | None = None):
        self.config = config or CameraConfig()
        self.config.validate()
        self.own_flow = MotionConfig()  # only when the motion stage did not measure the clip
        self.backend = DisFlow(
            self.own_flow.dis_preset, self.own_flow.dis_scale, self.own_flow.dis_patch_stride
        )

    def process(self, clip: Clip) -> Clip:
        if clip.frames is None:
            raise ValueError(f"clip {clip.clip_id}: camera motion needs the in-memory frames")
        motion = self.measure(clip.frames, clip.fps)
        clip.camera_motion = motion.label
        clip.camera_tx, clip.camera_ty = round(motion.tx, 3), round(motion.ty, 3)
        clip.camera_zoom, clip.camera_rotation = round(motion.zoom, 4), round(motion.rotation, 4)
        clip.camera_fit = round(motion.fit, 3)
        return clip

    def measure(self, frames: ClipFrames | np.ndarray, fps: float = 8.0) -> CameraMotion:
        if not isinstance(frames, ClipFrames):
            frames = ClipFrames.from_rgb(np.asarray(frames))
        measured = frames.memo.get(FLOW_MEMO)
        if not isinstance(measured, PairFlows):
            measured = pair_flows(frames, self.backend, self.own_flow)
        return camera_motion(measured, frames.grey(measured.size), fps, self.config)


# The columns it fills, as the shard schema types them (core/schema.py has them typed once).
CAMERA_COLUMNS = tuple(
    CLIP_SCHEMA.field(f"camera_{name}")
    for name in ("motion", "tx", "ty", "zoom", "rotation", "fit")
)
CAMERA_SCORES = (
    Score(
        "camera_motion",
        "camera motion",
        labels=LABELS,
        reason="camera",
        meaning="the camera moves as the folder's thresholds reject (reject.scores)",
    ),
)


@register_clip_stage(
    "camera", settings=CameraConfig, columns=CAMERA_COLUMNS, scores=CAMERA_SCORES, order=12
)
def camera_stage(settings: CameraConfig) -> ClipStage | None:
    """After motion (order 10), whose flow it reads from the frames."""
    return CameraStage(settings) if settings.enabled else None
