"""How far the pHash duplicate search (stages/quality/measures.py perceptual_hash, frames 0, 5, 10 and 15
of a clip, a match at a mean of 12 bits or less) sees a copy of a scene that was re-cropped or
re-timed, as a recap or a TV edit makes it: what a semantic search over CLIP embeddings is for
(docs/scores.md, "Semantic duplicates").

    python scripts/phash-recrop.py VIDEO [VIDEO ...]

For clips starting at frames 0, 40, 80 and 120 of each video, prints the mean Hamming distance of
the four hashes to: the same frames, the clip started 3 frames later, played 1.25x slower, cropped
to its central 80 % and scaled back (zoomed in), both, and the clip 2 s later (another clip)."""

from __future__ import annotations

import sys

import cv2
import numpy as np

from stages.quality import hamming, perceptual_hash

MATCH_BITS = 12  # reject.duplicate_max_distance's default


def frames(path: str) -> list[np.ndarray]:
    capture = cv2.VideoCapture(path)
    out = []
    while True:
        ok, frame = capture.read()
        if not ok:
            return out
        out.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))


def cropped(frame: np.ndarray, keep: float) -> np.ndarray:
    h, w = frame.shape[:2]
    ch, cw = int(h * keep), int(w * keep)
    y, x = (h - ch) // 2, (w - cw) // 2
    return cv2.resize(frame[y : y + ch, x : x + cw], (w, h), interpolation=cv2.INTER_AREA)


def hashes(video: list[np.ndarray], start: int, speed: float = 1.0) -> np.ndarray:
    picked = [video[start + round(k * 5 / speed)] for k in range(4)]
    return np.array([perceptual_hash(f) for f in picked], np.int64)


def main(paths: list[str]) -> None:
    for path in paths:
        video = frames(path)
        zoomed = [cropped(f, 0.8) for f in video]
        print(f"{path}: {len(video)} frames; a pHash match is {MATCH_BITS} bits or less")
        for start in (0, 40, 80, 120):
            if start + 64 > len(video):
                continue
            clip = hashes(video, start)
            copies = {
                "same": hashes(video, start),
                "+3 frames": hashes(video, start + 3),
                "1.25x slower": hashes(video, start, speed=0.8),
                "cropped 80%": hashes(zoomed, start),
                "cropped 80% +3 frames": hashes(zoomed, start + 3),
                "2 s later": hashes(video, start + 48),
            }
            bits = {name: float(hamming(clip, h).mean()) for name, h in copies.items()}
            print(f"  clip at frame {start}: " + ", ".join(f"{k} {v:g}" for k, v in bits.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
