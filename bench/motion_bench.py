"""Motion-stage figures: flow pairs per second, CPU time per clip, levels of real clips.

    python -m bench.motion_bench            # DIS speed, and the level spread of Sintel windows
    python -m bench.motion_bench --memflow  # also MemFlow pairs/s (480x720) on the best device

Timings use the process's CPU time where the work runs on the CPU, so other jobs on a shared
machine distort them less than wall time would; MemFlow on a GPU is timed by wall clock.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import av
import cv2
import numpy as np

from stages.motion import UNIT_HEIGHT, UNIT_WIDTH, MotionConfig, MotionScope

ROOT = Path(__file__).resolve().parent.parent
SINTEL = ROOT / "samples" / "sintel_trailer.mp4"
CLIP_FRAMES, CLIP_FPS = 16, 8.0
CUT_DIFFERENCE = 30.0  # mean grey change (0-255) between source frames that counts as a hard cut


def synthetic_clip(speed: float = 6.0, frames: int = CLIP_FRAMES, seed: int = 0) -> np.ndarray:
    """A multi-scale random texture panning `speed` px per frame at 480x720."""
    rng = np.random.default_rng(seed)
    pad = int(abs(speed) * frames) + 8
    height, width = UNIT_HEIGHT, UNIT_WIDTH + pad
    texture = np.asarray(
        sum(
            cv2.resize(rng.random((height // c + 2, width // c + 2, 3)), (width, height))
            for c in (64, 32, 16, 8, 4)
        )
    )
    texture = (255 * (texture - texture.min()) / np.ptp(texture)).astype(np.uint8)
    shifts = [np.array([[1, 0, -speed * i], [0, 1, 0]], dtype=np.float32) for i in range(frames)]
    return np.stack([cv2.warpAffine(texture, m, (UNIT_WIDTH, UNIT_HEIGHT)) for m in shifts])


def dis_pairs_per_second(config: MotionConfig | None = None, clips: int = 6) -> float:
    """DIS flow pairs per CPU second (flow only), on 480x720 frames, one OpenCV thread."""
    stage = MotionScope(config or MotionConfig())
    stage.setup()
    frames = synthetic_clip()
    pairs = list(range(len(frames) - 1))
    start = time.process_time()
    for _ in range(clips):
        for _speed in stage.backend.speeds(frames, pairs):
            pass
    return clips * len(pairs) / (time.process_time() - start)


def motion_seconds_per_clip(config: MotionConfig | None = None, clips: int = 6) -> float:
    """CPU seconds the whole motion stage spends on one 16-frame 480x720 clip (rule included)."""
    stage = MotionScope(config or MotionConfig())
    stage.setup()
    frames = synthetic_clip()
    start = time.process_time()
    for _ in range(clips):
        stage.measure(frames)
    return (time.process_time() - start) / clips


def memflow_pairs_per_second(
    device: str = "auto", checkpoint: str | None = None, pairs: int = 8
) -> float:
    """MemFlow pairs per second at 480x720 (wall clock, after one warm-up pair).

    Without a checkpoint the model has random weights: the speed of a network does not depend
    on its weights, so this measures the real cost (the flow itself is meaningless then).
    """
    config = MotionConfig(
        backend="memflow",
        memflow_device=device,
        memflow_checkpoint=checkpoint,
        memflow_random_weights=checkpoint is None,
    )
    stage = MotionScope(config)
    stage.setup()
    frames = synthetic_clip(frames=pairs + 2)
    list(stage.backend.speeds(frames, [0]))  # warm-up: kernels, allocator
    _synchronise(stage)
    start = time.perf_counter()
    list(stage.backend.speeds(frames, list(range(1, pairs + 1))))
    _synchronise(stage)
    return pairs / (time.perf_counter() - start)


def _synchronise(stage: MotionScope) -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def real_clip_windows(path: Path = SINTEL, crop_rows: tuple[int, int] | None = (58, 422)):
    """Yield (start_frame, 16 x 480 x 720 frames) for each 2-s window of a film without a hard cut.

    Mirrors what the pipeline does on the Sintel trailer: letterbox removed (`crop_rows`), the
    picture centre-cropped to 3:2 and resized to 480x720, one frame in three (24 -> 8 fps).
    A window holding a hard cut is skipped, as scene detection would split it.
    """
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.average_rate is None:
            raise ValueError(f"{path}: the video stream declares no frame rate")
        rate = float(stream.average_rate)
        window = int(round(2 * rate))
        picks = {int(round(k * window / CLIP_FRAMES)) for k in range(CLIP_FRAMES)}
        sampled, cut, previous = [], False, None
        for index, frame in enumerate(container.decode(stream)):
            rgb = frame.to_ndarray(format="rgb24")
            picture = rgb[crop_rows[0] : crop_rows[1]] if crop_rows else rgb
            small = cv2.cvtColor(
                cv2.resize(picture, (90, 60), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY
            ).astype(np.int16)
            position = index % window
            if position and previous is not None:
                cut |= float(np.mean(np.abs(small - previous))) > CUT_DIFFERENCE
            previous = small
            if position in picks:
                sampled.append(_to_clip_frame(picture))
            if position == window - 1:
                if not cut and len(sampled) == CLIP_FRAMES:
                    yield index - window + 1, np.stack(sampled)
                sampled, cut = [], False


def _to_clip_frame(picture: np.ndarray) -> np.ndarray:
    height, width = picture.shape[:2]
    target_width = min(width, int(round(height * UNIT_WIDTH / UNIT_HEIGHT)))
    left = (width - target_width) // 2
    return cv2.resize(
        picture[:, left : left + target_width],
        (UNIT_WIDTH, UNIT_HEIGHT),
        interpolation=cv2.INTER_AREA,
    )


def real_clip_levels(path: Path = SINTEL, config: MotionConfig | None = None) -> list[dict]:
    stage = MotionScope(config or MotionConfig())
    stage.setup()
    levels = stage.levels
    assert levels is not None, "setup() loads the level edges"
    rows = []
    for start, frames in real_clip_windows(path):
        measured = stage.measure(frames)
        rows.append(
            {
                "start_frame": start,
                "scope": measured.scope,
                "level": levels.level(measured.scope),
                "held_pairs": measured.held_pairs,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memflow", action="store_true", help="also time MemFlow at 480x720")
    parser.add_argument("--memflow-checkpoint", help="MemFlow checkpoint (default: random weights)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    print(
        f"DIS default: {dis_pairs_per_second():.0f} flow pairs per CPU second; "
        f"motion stage {1000 * motion_seconds_per_clip():.1f} ms CPU per 16-frame clip"
    )
    rows = real_clip_levels()
    counts = Counter(r["level"] for r in rows)
    print(
        f"Sintel trailer, {len(rows)} cut-free 2-s windows: levels "
        + ", ".join(f"{k}: {counts.get(k, 0)}" for k in range(1, 6))
    )
    print("scopes: " + " ".join(f"{r['scope']:.1f}" for r in rows))
    if args.memflow:
        speed = memflow_pairs_per_second(args.device, args.memflow_checkpoint)
        print(f"MemFlow 480x720: {speed:.2f} pairs/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
