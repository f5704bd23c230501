"""CLIP image and text embeddings of a local checkpoint: the one implementation that the trainer's
CLIP-I and CLIP-T metrics (trainer/evaluate.py) and the pipeline's clip scores
(stages/scoring/clip_scores.py: embedding, aesthetic score, caption match) share.

Frames are embedded whole: the uint8 RGB frame is resized to the model's square input (bicubic,
antialiased; no crop, so a 3:2 frame is squeezed rather than cut) and normalised with the
checkpoint's own mean and std (preprocessor_config.json; CLIP's where it has none). An embedding
is the projected image (or text) feature scaled to unit length, so the dot product of two is
their cosine similarity.

A checkpoint is a local folder only (`checkpoint_folder`): nothing is downloaded, and a missing
or wrong folder is an error naming the setting that gave it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
# CLIP's text encoder has 77 positions; a longer caption is cut there
TEXT_TOKENS = 77


class ClipCheckpointError(FileNotFoundError):
    """A CLIP checkpoint setting that names no usable folder (the message names the setting)."""


def checkpoint_folder(setting: str, location: str | Path) -> str:
    """`location` as a CLIP checkpoint folder in transformers format, holding its config, its
    weights and its tokenizer; else an error naming `setting`."""
    path = Path(location).expanduser()
    if not path.is_dir():
        raise ClipCheckpointError(
            f"{setting}={location}: no such checkpoint folder (a CLIP model in transformers "
            f"format, e.g. openai/clip-vit-large-patch14 saved locally; nothing is downloaded)"
        )
    problem = _not_a_clip_folder(path)
    if problem:
        raise ClipCheckpointError(f"{setting}={location}: the folder {problem}")
    return str(path)


def _not_a_clip_folder(path: Path) -> str | None:
    """What keeps a folder from being a CLIP checkpoint, or None."""
    config = path / "config.json"
    if not config.is_file():
        return "lacks config.json"
    kind = json.loads(config.read_text()).get("model_type")
    if kind != "clip":
        return f"holds a {kind!r} model, not CLIP (model_type clip)"
    if not list(path.glob("*.safetensors")) + list(path.glob("pytorch_model*.bin")):
        return "holds no weights (*.safetensors or pytorch_model.bin)"
    if not any((path / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        return "holds no tokenizer (tokenizer.json or vocab.json)"
    return None


def pixels(frames: np.ndarray, size: int, mean, std, device):
    """uint8 N x H x W x 3 -> normalised N x 3 x size x size (bicubic, whole frame)."""
    import torch
    import torch.nn.functional as F

    images = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    images = F.interpolate(images, size=(size, size), mode="bicubic", antialias=True).clamp(0, 1)
    mean_t = torch.tensor(mean).view(1, 3, 1, 1)
    std_t = torch.tensor(std).view(1, 3, 1, 1)
    return ((images - mean_t) / std_t).to(device)


def image_stats(folder: str, default_mean, default_std):
    """The mean and std a checkpoint's preprocessor declares, else the defaults given."""
    config = Path(folder) / "preprocessor_config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        return tuple(data.get("image_mean", default_mean)), tuple(
            data.get("image_std", default_std)
        )
    return default_mean, default_std


def features(output):
    """transformers 5 may return a model output instead of a tensor from get_*_features."""
    return getattr(output, "pooler_output", output) if not hasattr(output, "norm") else output


def unit(x):
    """Each row scaled to unit length (a zero row stays zero)."""
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


class ClipScorer:
    """CLIP image and text embeddings of a checkpoint folder (CLIPModel and its tokenizer)."""

    def __init__(self, root: str, device, dtype=None):
        """`root`: a folder already checked (`checkpoint_folder`, or the trainer's `resolve`)."""
        from transformers import AutoTokenizer, CLIPModel

        self.model = CLIPModel.from_pretrained(root, dtype=dtype).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(root)
        self.size = self.model.config.vision_config.image_size
        self.mean, self.std = image_stats(root, CLIP_MEAN, CLIP_STD)
        self.device = device
        self.dtype = self.model.dtype
        self.dim = self.model.config.projection_dim

    def images(self, frames: np.ndarray):
        """Unit image embeddings of uint8 RGB frames (N x H x W x 3), one row a frame."""
        import torch

        with torch.no_grad():
            batch = pixels(frames, self.size, self.mean, self.std, self.device).to(self.dtype)
            return unit(features(self.model.get_image_features(pixel_values=batch)).float())

    def texts(self, texts: list[str]):
        """Unit text embeddings, one row a text (cut at CLIP's 77 tokens)."""
        import torch

        with torch.no_grad():
            tokens = self.tokenizer(
                texts, padding=True, truncation=True, max_length=TEXT_TOKENS, return_tensors="pt"
            ).to(self.device)
            return unit(features(self.model.get_text_features(**tokens)).float())

    def image_similarity(self, generated: np.ndarray, reference: np.ndarray) -> float:
        """CLIP-I: the mean cosine of frames paired by position, or of every frame with one
        reference image."""
        a, b = paired(self.images, generated, reference)
        return float((a * b).sum(-1).mean())

    def text_similarity(self, images, text: str) -> float:
        """CLIP-T: the mean cosine of image embeddings with the text's. `images` are uint8 RGB
        frames, or embeddings already made (`images()`, or a clip's stored embedding)."""
        return float(self.text_similarities([images], [text])[0])

    def text_similarities(self, images: list, texts: list[str]) -> np.ndarray:
        """CLIP-T of each item of `images` (frames, or embeddings already made) with its own
        text, the texts embedded in one batch."""
        import torch

        text_embeddings = self.texts(texts)
        scores = []
        for item, text_embedding in zip(images, text_embeddings):
            if isinstance(item, np.ndarray) and item.dtype == np.uint8:
                embedded = self.images(item)
            else:
                embedded = torch.as_tensor(np.asarray(item, np.float32), device=self.device)
            scores.append(float((embedded.reshape(-1, self.dim) * text_embedding).sum(-1).mean()))
        return np.array(scores, np.float32)


def paired(embed, generated: np.ndarray, reference: np.ndarray):
    """Embeddings of frames paired by position, or of every generated frame with one reference
    image (the benchmark's character picture)."""
    if len(reference) == 1:
        return embed(generated), embed(reference)
    count = min(len(generated), len(reference))
    return embed(generated[:count]), embed(reference[:count])
