"""Shot encoder E_a: the action-aware representation of one shot.

CLIP features of the shot's first frame (a hidden layer, CLS dropped) and T5 features of its
motion description each pass through Linear-GELU-Linear and a LayerNorm, then are concatenated,
text first: text_tokens + CLIP patches tokens (30 + 196 = 226 with the real backbones), each as
wide as the decoder's transformer (1920 for CogVideoX-2B), which fills the decoder's text slot.
The backbones are frozen; only the projections learn.
"""

from __future__ import annotations

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


class ShotEncoder(nn.Module):
    def __init__(
        self, clip, t5, t5_tokenizer, out_dim: int, text_tokens: int, clip_layer: int = -2
    ):
        super().__init__()
        self.clip, self.t5, self.tokenizer = clip, t5, t5_tokenizer
        self.text_tokens, self.clip_layer = text_tokens, clip_layer
        self.image_size = clip.config.image_size
        self.visual_proj = projection(clip.config.hidden_size, out_dim)
        self.text_proj = projection(t5.config.d_model, out_dim)
        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def num_tokens(self) -> int:
        return self.text_tokens + (self.image_size // self.clip.config.patch_size) ** 2

    def forward(self, first_frames: torch.Tensor, descriptions: list[str]) -> torch.Tensor:
        """first_frames: B x 3 x H x W uint8; returns B x num_tokens x out_dim."""
        visual, text = self.features(first_frames, descriptions)
        return torch.cat([self.text_proj(text), self.visual_proj(visual)], dim=1)

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
        text = self.t5(
            input_ids=tokens.input_ids, attention_mask=tokens.attention_mask
        ).last_hidden_state
        return hidden[:, 1:].float(), text.float()

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """CLIP's own recipe: shorter side to image_size (bicubic), centre crop, normalise."""
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
