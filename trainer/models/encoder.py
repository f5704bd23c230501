"""Shot encoder E_a: the action-aware representation of one shot.

CLIP features of the shot's first frame (a hidden layer, CLS dropped) and T5 features of its
action ("Softly talk": adverb and motion description, prompts.game) each pass through
Linear-GELU-Linear and a LayerNorm, then are concatenated, text first: text_tokens + CLIP patches
tokens (30 + 196 = 226 with the real backbones), each as wide as the decoder's transformer (1920
for CogVideoX-2B), which fills the decoder's text slot. The backbones are frozen; only the
projections learn.

Condition dropout (the release's ucg_rate and do_training_cfg) acts on the features before the
projections: a dropped part's features are zeros. The unconditional shot, which guidance
contrasts with, is the projection of all-zero features (the release's force_uc_zero_embeddings
with a zero CLIP condition), so it is one fixed tensor for a given E_a.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# OpenAI's CLIP normalisation, which OpenCLIP's LAION models also use.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def projection(in_dim: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(in_dim, out_dim), nn.GELU(), nn.Linear(out_dim, out_dim), nn.LayerNorm(out_dim)
    )


@dataclass
class ConditionDrop:
    """Which samples of a batch lose which part of their condition (per-sample booleans)."""

    zero_text: list[bool]
    empty_text: list[bool]
    zero_image: list[bool]

    @classmethod
    def draw(cls, generators: list[torch.Generator], text: float, empty: float, image: float):
        """Three draws per sample from its own generator, so a resume or another rank count
        replays the same decisions."""
        draws = [torch.rand(3, generator=g).tolist() for g in generators]
        return cls(
            zero_text=[d[0] < text for d in draws],
            empty_text=[d[1] < empty for d in draws],
            zero_image=[d[2] < image for d in draws],
        )

    def fractions(self) -> dict[str, torch.Tensor]:
        """Share of the batch per kind of dropout, logged with every step (averaged over ranks)."""
        both = [t and i for t, i in zip(self.zero_text, self.zero_image)]
        return {
            "drop_text": _share(self.zero_text),
            "drop_empty_text": _share(self.empty_text),
            "drop_image": _share(self.zero_image),
            "drop_all": _share(both),
        }


class ShotEncoder(nn.Module):
    mean: torch.Tensor  # CLIP normalisation buffers
    std: torch.Tensor

    def __init__(
        self,
        clip,
        t5,
        t5_tokenizer,
        out_dim: int,
        text_tokens: int,
        clip_layer: int = -2,
        clip_input: str = "resize",
        t5_attention_mask: bool = False,
    ):
        super().__init__()
        if clip_input not in ("resize", "center_crop"):
            raise ValueError(f"clip_input={clip_input!r}: choose resize or center_crop")
        self.clip, self.t5, self.tokenizer = clip, t5, t5_tokenizer
        self.text_tokens, self.clip_layer, self.clip_input = text_tokens, clip_layer, clip_input
        self.t5_attention_mask = t5_attention_mask
        self.image_size = clip.config.image_size
        self.visual_dim, self.text_dim = int(clip.config.hidden_size), int(t5.config.d_model)
        self.visual_proj = projection(self.visual_dim, out_dim)
        self.text_proj = projection(self.text_dim, out_dim)
        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def num_tokens(self) -> int:
        return self.text_tokens + (self.image_size // self.clip.config.patch_size) ** 2

    @property
    def num_patches(self) -> int:
        return self.num_tokens - self.text_tokens

    def forward(
        self, first_frames: torch.Tensor, actions: list[str], drop: ConditionDrop | None = None
    ) -> torch.Tensor:
        """first_frames: B x 3 x H x W uint8; returns B x num_tokens x out_dim."""
        if drop is not None:
            actions = ["" if e else a for a, e in zip(actions, drop.empty_text)]
        visual, text = self.features(first_frames, actions)
        if drop is not None:
            text = text * _keep(drop.zero_text, text)
            visual = visual * _keep(drop.zero_image, visual)
        return self.project(visual, text)

    def project(self, visual: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.text_proj(text), self.visual_proj(visual)], dim=1)

    def unconditional(self, batch_size: int = 1) -> torch.Tensor:
        """The unconditional shot: the projections of all-zero T5 and CLIP features."""
        device = next(self.text_proj.parameters()).device
        text = torch.zeros(batch_size, self.text_tokens, self.text_dim, device=device)
        visual = torch.zeros(batch_size, self.num_patches, self.visual_dim, device=device)
        return self.project(visual, text)

    @torch.no_grad()
    def features(
        self, first_frames: torch.Tensor, descriptions: list[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = next(self.clip.parameters()).dtype
        pixels = self.preprocess(first_frames).to(dtype)
        hidden = self.clip(pixel_values=pixels, output_hidden_states=True).hidden_states[
            self.clip_layer
        ]
        tokens = self.tokenizer(
            descriptions,
            padding="max_length",
            max_length=self.text_tokens,
            truncation=True,
            return_tensors="pt",
        ).to(first_frames.device)
        # The release and CogVideoX give T5 no mask: the padding's features are part of what the
        # decoder was trained to read.
        mask = tokens.attention_mask if self.t5_attention_mask else None
        # an fp32 T5 runs in fp32 under the loop's bf16 autocast too, as the release's
        fp32 = next(self.t5.parameters()).dtype == torch.float32
        with torch.autocast(first_frames.device.type, enabled=False) if fp32 else nullcontext():
            text = self.t5(input_ids=tokens.input_ids, attention_mask=mask).last_hidden_state
        return hidden[:, 1:].float(), text.float()

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames -> CLIP's normalised square input, by `clip_input`.

        `resize` (the release's FrozenOpenCLIPImageEmbedder_196): the whole frame to
        image_size x image_size, bicubic with antialiasing, aspect not kept. `center_crop` (CLIP's
        own recipe): shorter side to image_size, then the centre square.
        """
        if self.clip_input == "resize":
            images = F.interpolate(
                frames.float() / 255.0,
                size=(self.image_size, self.image_size),
                mode="bicubic",
                align_corners=True,  # as the release's kornia resize
                antialias=True,
            ).clamp(0, 1)
            return (images - self.mean) / self.std
        height, width = frames.shape[-2:]
        scale = self.image_size / min(height, width)
        size = (
            max(self.image_size, round(height * scale)),
            max(self.image_size, round(width * scale)),
        )
        images = F.interpolate(
            frames.float() / 255.0, size=size, mode="bicubic", align_corners=False, antialias=True
        ).clamp(0, 1)
        top, left = (size[0] - self.image_size) // 2, (size[1] - self.image_size) // 2
        images = images[..., top : top + self.image_size, left : left + self.image_size]
        return (images - self.mean) / self.std


def _keep(dropped: list[bool], like: torch.Tensor) -> torch.Tensor:
    """B x 1 x 1 multiplier: 0 for a dropped sample, 1 otherwise."""
    keep = torch.tensor([0.0 if d else 1.0 for d in dropped], device=like.device, dtype=like.dtype)
    return keep[:, None, None]


def _share(flags: list[bool]) -> torch.Tensor:
    return torch.tensor(sum(flags) / len(flags))
