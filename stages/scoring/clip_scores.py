"""Clip stage (registered, order 70): the CLIP scores of a clip, from a checkpoint the user gives.

Per clip, while its frames are in memory, `frames` evenly spaced frames of the 16 are embedded by
the CLIP checkpoint of `clip_scores.model` (stages/scoring/clip_model.py, the code the trainer's CLIP-I
and CLIP-T use), and their unit embeddings averaged and scaled to unit length again:

- `clip_embedding`: that embedding, float16 (768 values, 1,536 bytes, for ViT-L/14; 1,024 for
  ViT-B). It is a shard column, not a sidecar file: it is written, renamed and resumed with the
  clip's own row (a sidecar would need its own commit rule on object storage), the manifest and
  `open_dataset` carry it for notebooks, and the folder's semantic duplicate pass
  (pipeline/passes/similar.py) reads that one column, cheaply, from Parquet;
- `aesthetic_score`: the head of `clip_scores.aesthetic_head` (stages/scoring/aesthetic.py: LAION's
  linear and MLP heads) over that embedding; null without a head;
- `caption_match`: filled by the caption pass once the clip is captioned
  (pipeline/passes/caption_films.py): the CLIP similarity of the embedding with the clip's
  instruction, as the trainer's CLIP-T computes it.

Without a checkpoint the stage is off and the three columns stay null (the run says so once); a
wrong path is a ConfigError naming the setting, before any film is cut. Nothing is downloaded.
On a GPU a clip's frames go through the model as one batch (float16); on the CPU it runs, slowly
(docs/scores.md has the figures). `process_batch` embeds many clips' frames at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from core.device import pick_device, resolve_device, uses_cuda
from core.record import CAPTION_OK, STATUS_OK, Clip
from core.resources import Resources
from core.settings import ConfigError, Settings, check_choice
from stages.base import ClipStage, register_clip_stage
from stages.scoring.aesthetic import ACTIVATIONS, AestheticHead, AestheticHeadError, load_head
from stages.scoring.clip_model import ClipCheckpointError, ClipScorer, checkpoint_folder
from stages.scoring.scores import Score

SECTION = "clip_scores"
EMBEDDING, AESTHETIC, CAPTION_MATCH = "clip_embedding", "aesthetic_score", "caption_match"
CLIP_SCORE_COLUMNS = (
    pa.field(EMBEDDING, pa.list_(pa.float16())),
    pa.field(AESTHETIC, pa.float32()),
    pa.field(CAPTION_MATCH, pa.float32()),
)
CLIP_SCORES_OFF = (
    "clip scores: off, no CLIP checkpoint (set clip_scores.model): clip_embedding, "
    "aesthetic_score and caption_match stay null, and no semantic duplicates are searched"
)
MAX_EMBEDDING_BYTES = 1536  # about 1.5 KB a clip: a million clips stay near 1.5 GB


@dataclass
class ClipScoreConfig(Settings):
    content_fields = ()  # the model path enters the fingerprint once given (optional_content)
    model: str | None = None
    """CLIP checkpoint folder in transformers format (CLIPModel with its tokenizer), e.g.
    openai/clip-vit-large-patch14 saved locally. None: no embeddings, aesthetic or caption-match
    scores (the columns stay null)."""
    aesthetic_head: str | None = None
    """Aesthetic head file over the CLIP embedding (.pth state_dict or .safetensors): LAION's
    linear or improved MLP head (for ViT-L/14). None: no aesthetic score."""
    aesthetic_activation: str = "none"
    """Between the head's layers: 'none' (the released linearMSE heads) or 'relu' (reluMSE)."""
    frames: int = 4
    """Frames of the clip's 16 that are embedded, evenly spaced; their mean is the clip's."""
    device: str = "auto"
    """'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1'."""

    def validate(self) -> None:
        check_choice(SECTION, "aesthetic_activation", self.aesthetic_activation, ACTIVATIONS)
        if not 1 <= self.frames <= 16:
            raise ConfigError(f"{SECTION}.frames={self.frames}: choose 1 to 16 (a clip has 16)")
        if self.model is None:
            if self.aesthetic_head is not None:
                raise ConfigError(
                    f"{SECTION}.aesthetic_head needs {SECTION}.model (the CLIP it reads)"
                )
            return
        try:
            root = checkpoint_folder(f"{SECTION}.model", self.model)
            if self.aesthetic_head is not None:
                head = load_head(
                    f"{SECTION}.aesthetic_head", self.aesthetic_head, self.aesthetic_activation
                )
                _check_head_fits(head.input_size, root, self.aesthetic_head)
        except (ClipCheckpointError, AestheticHeadError) as exc:
            raise ConfigError(str(exc)) from None

    def optional_content(self) -> dict:
        if self.model is None:
            return {}
        return {
            "model": str(Path(self.model).expanduser().resolve()),
            "aesthetic_head": self.aesthetic_head,
            "aesthetic_activation": self.aesthetic_activation,
            "frames": self.frames,
        }


def _check_head_fits(input_size: int, root: str, head_location: str) -> None:
    config = json.loads((Path(root) / "config.json").read_text())
    dim = config.get("projection_dim", 512)
    if input_size != dim:
        raise AestheticHeadError(
            f"{SECTION}.aesthetic_head={head_location}: the head takes {input_size} values, "
            f"{SECTION}.model gives embeddings of {dim}"
        )


def frame_picks(count: int, length: int = 16) -> np.ndarray:
    """`count` evenly spaced frame positions of a clip of `length` frames."""
    return np.unique(np.linspace(0, length - 1, count).round().astype(int))


def mean_embedding(frame_embeddings: np.ndarray) -> np.ndarray:
    """The clip's embedding: the mean of its frames' unit embeddings, scaled to unit length."""
    mean = np.asarray(frame_embeddings, np.float32).mean(axis=0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


class ClipScores(ClipStage):
    name = "clip_scores"

    def __init__(self, config: ClipScoreConfig):
        config.validate()
        self.config = replace(config, device=resolve_device(config.device))
        self.resources = Resources(cpus=1.0, gpus=1.0 if uses_cuda(self.config.device) else 0.0)
        self.scorer: ClipScorer | None = None
        self.head: AestheticHead | None = None

    def setup(self) -> None:
        if self.scorer is not None:
            return
        import torch

        device = torch.device(pick_device(self.config.device, f"{SECTION}.device"))
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        assert self.config.model is not None, "the stage is built only with a model"
        root = checkpoint_folder(f"{SECTION}.model", self.config.model)
        self.scorer = ClipScorer(root, device, dtype)
        if self.config.aesthetic_head is not None:
            self.head = load_head(
                f"{SECTION}.aesthetic_head",
                self.config.aesthetic_head,
                self.config.aesthetic_activation,
            )

    def _scorer(self) -> ClipScorer:
        self.setup()
        assert self.scorer is not None, "setup loads the model"
        return self.scorer

    def process(self, clip: Clip) -> Clip:
        return self.process_batch([clip])[0]

    def process_batch(self, clips: list[Clip]) -> list[Clip]:
        """Every clip's picked frames through the model in one batch; should the batch fail,
        clip by clip, so that one clip's failure is recorded on it alone."""
        if len(clips) == 1:
            return self._embed(clips)
        try:
            return self._embed(clips)
        except Exception:
            return [self.process_safely(clip) for clip in clips]

    def _embed(self, clips: list[Clip]) -> list[Clip]:
        scorer = self._scorer()
        ready = [(c, c.frames) for c in clips if c.status == STATUS_OK and c.frames is not None]
        if not ready:
            return clips
        picks = frame_picks(self.config.frames, len(ready[0][1]))
        frames = np.stack([f.rgb_frame(int(k)) for _, f in ready for k in picks])
        embedded = scorer.images(frames).cpu().numpy().reshape(len(ready), len(picks), -1)
        # the stored float16 values are what the head reads, so a score can be redone from them
        means = np.stack([mean_embedding(e) for e in embedded]).astype(np.float16)
        scores = self.head(means) if self.head is not None else [None] * len(ready)
        for (clip, _), mean, score in zip(ready, means, scores):
            clip.extra[EMBEDDING] = mean
            clip.extra[AESTHETIC] = None if score is None else float(score)
        return clips

    def caption_match(self, clips: list[Clip]) -> int:
        """Fill `caption_match` of every captioned clip with an embedding: the trainer's CLIP-T
        (stages/scoring/clip_model.py) of its stored embedding with its instruction. Other clips get
        null (a clip recaptioned and failed keeps no old score). Returns the clips scored."""
        scored = [
            c
            for c in clips
            if c.caption_status == CAPTION_OK
            and c.instruction
            and c.extra.get(EMBEDDING) is not None
        ]
        for clip in clips:
            clip.extra[CAPTION_MATCH] = None
        if not scored:
            return 0
        scorer = self._scorer()
        embeddings = [stored_embedding(c.extra[EMBEDDING]) for c in scored]
        texts = [c.instruction or "" for c in scored]
        for clip, score in zip(scored, scorer.text_similarities(embeddings, texts)):
            clip.extra[CAPTION_MATCH] = float(score)
        return len(scored)


def stored_embedding(value) -> np.ndarray | None:
    """A clip's `clip_embedding` as float32 (None where it has none)."""
    return None if value is None else np.asarray(value, np.float32)


# What the report, the review page's filters, the notebook API and reject.scores offer of them
# (stages/scoring/scores.py); the embedding is no score: the semantic duplicate pass reads it.
CLIP_SCORES = (
    Score(
        AESTHETIC,
        "aesthetic score",
        unit="the aesthetic head's rating (LAION: about 1 to 10)",
        reason="unaesthetic",
        meaning="the aesthetic head rates it below the folder's threshold (reject.scores)",
    ),
    Score(
        CAPTION_MATCH,
        "caption match",
        unit="CLIP cosine of the clip's frames and its caption",
        reason="caption_mismatch",
        meaning="its caption matches its frames less than the folder's threshold (reject.scores)",
    ),
)


@register_clip_stage(
    SECTION, settings=ClipScoreConfig, columns=CLIP_SCORE_COLUMNS, scores=CLIP_SCORES, order=70
)
def clip_scores_stage(settings: ClipScoreConfig) -> ClipStage | None:
    """After the measurements, before encode releases the frames; off without a checkpoint."""
    return ClipScores(settings) if settings.model else None
