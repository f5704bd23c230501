"""What the quality stage measures on a clip's frames (issue 13): the brightness series black
frames, fades and flashes are read from, and the perceptual hashes near duplicates are found by
(and the distance between two hashes)."""

from __future__ import annotations

import cv2
import numpy as np

LUMA_SIZE = (60, 90)  # (h, w) grey copy the brightness values are measured on
HASH_INPUT_SIZE = (120, 180)  # (h, w) grey copy a hashed frame is shrunk from
HASH_SIDE = 32  # frames are shrunk to 32x32 grey for the DCT of the perceptual hash


def small_grey(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """One RGB frame as grey at `size` (h, w).

    Bilinear shrinking samples rather than averages: a fifth of the cost of area averaging, which
    matters at 16 frames per clip; the brightness values are statistics over thousands of such
    samples, and the hash averages its input further down to 32x32."""
    small = cv2.resize(frame, size[::-1], interpolation=cv2.INTER_LINEAR)
    return cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)


def luma_series(frames: np.ndarray) -> tuple[list[float], list[float]]:
    """Per frame: mean and 99th-percentile grey level (0-255), measured at LUMA_SIZE. The
    percentile is the pixel value 1 % of the pixels are brighter than (no interpolation)."""
    flat = np.stack([small_grey(f, LUMA_SIZE) for f in frames]).reshape(len(frames), -1)
    k = int(0.99 * (flat.shape[1] - 1))
    peaks = np.partition(flat, k, axis=1)[:, k]  # a partial sort: the percentile's cost halved
    return [round(float(m), 3) for m in flat.mean(axis=1)], [float(p) for p in peaks]


def perceptual_hash(frame: np.ndarray) -> int:
    """64-bit DCT hash (pHash) of one RGB frame: the signs of the 8x8 lowest frequencies of a
    32x32 grey copy against their median. Global gain and offset, rescaling and re-encoding
    barely move it."""
    grey = small_grey(frame, HASH_INPUT_SIZE)
    small = cv2.resize(grey, (HASH_SIDE, HASH_SIDE), interpolation=cv2.INTER_AREA)
    low = cv2.dct(small.astype(np.float32))[:8, :8].flatten()
    bits = low > np.median(low[1:])  # the DC term (overall brightness) does not set the median
    return int(np.packbits(bits).view(">i8")[0])


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bitwise distance of int64 hashes (broadcasting). Counted on the unsigned view: numpy's
    bitwise_count counts the bits of a signed value's absolute value, which for hashes that
    differ in their top bit is not the number of differing bits."""
    return np.bitwise_count(np.asarray(np.bitwise_xor(a, b)).view(np.uint64))
