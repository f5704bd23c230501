"""Compare PP-OCR text detection models as the quality stage runs them (issue 18, item 6).

    python -m bench.text_detectors --models A.onnx,B.onnx [--width 256] [--probability 0.3]

Frames: every 8th frame of the sample film's shots without text (83-199 and 571-959), letterbox
removed, 480x720 as clips store them. For each model: how many of these clean frames read as text
(area over the reject threshold, a false reject of a real shot), and how many of every third
frame with a one-line subtitle drawn at 12, 14, 16 and 20 pixels read as text; and the detector's
milliseconds per frame. Without --models, the model the quality stage uses by default.
"""

from __future__ import annotations

import argparse
import time

import av
import cv2
import numpy as np

from bench.run import SAMPLE
from stages.burned_in.text_detector import TextDetector
from stages.quality import RejectConfig

SHOTS_WITHOUT_TEXT = [*range(83, 200, 8), *range(571, 960, 8)]
SUBTITLE_PIXELS = (12, 14, 16, 20)


def clean_frames() -> list[np.ndarray]:
    wanted, found = set(SHOTS_WITHOUT_TEXT), []
    with av.open(str(SAMPLE)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                picture = frame.to_ndarray(format="rgb24")[58:422]
                found.append(cv2.resize(picture, (720, 480), interpolation=cv2.INTER_AREA))
            if i > max(wanted):
                break
    return found


def with_subtitle(picture: np.ndarray, pixels: int) -> np.ndarray:
    """A white one-line subtitle whose capitals are about `pixels` tall (Hershey simplex is
    about 22 pixels tall at scale 1)."""
    out = picture.copy()
    thickness = 1 if pixels < 16 else 2
    cv2.putText(
        out,
        "I have been looking for you",
        (160, 445),
        cv2.FONT_HERSHEY_SIMPLEX,
        pixels / 22,
        (255, 255, 255),
        thickness,
        cv2.LINE_AA,
    )
    return out


def measure(model: str | None, width: int, probability: float, frames: list) -> dict:
    limit = RejectConfig().text_max_area
    detector = TextDetector(model, width, probability)
    detector.areas(frames[:1])  # warm-up
    began = time.perf_counter()
    clean = [detector.areas([f])[0] for f in frames]
    milliseconds = (time.perf_counter() - began) / len(frames) * 1000
    row = {
        "model": detector.name,
        "ms_per_frame": round(milliseconds, 1),
        "clean_frames_read_as_text": f"{sum(a > limit for a in clean)}/{len(clean)}",
        "largest_clean_area": round(max(clean), 4),
    }
    for pixels in SUBTITLE_PIXELS:
        areas = [detector.areas([with_subtitle(f, pixels)])[0] for f in frames[::3]]
        row[f"subtitle_{pixels}px_found"] = f"{sum(a > limit for a in areas)}/{len(areas)}"
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="ONNX files, comma-separated")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--probability", type=float, default=0.3)
    args = parser.parse_args(argv)
    frames = clean_frames()
    for model in [m for m in args.models.split(",") if m] or [None]:
        print(measure(model, args.width, args.probability, frames), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
