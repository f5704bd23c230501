"""Phase (a): train the shot encoder E_a with the decoder D_a on every captioned clip.

For the first `encoder_warmup_steps` steps E_a and the decoder's motion MLP learn (the decoder's
LoRA and adaLN modulation get no update), then all of them together, as the release; the loss is the decoder's diffusion loss. Condition
dropout (models/encoder.py) zeroes parts of E_a's input per sample, so the decoder also learns the
unconditional prediction that guidance needs; each step logs the share of each kind of drop.
Run: `python -m trainer.phases.encoder --config trainer/configs/encoder.yaml --shards DATASET`.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.models import build
from trainer.models.encoder import ConditionDrop
from trainer.phases.loop import sample_generators
from trainer.shared.data import ClipCatalog, ShotDataset, clip_samples, record_motion_levels


class EncoderPhase(nn.Module):
    def __init__(self, config, device, dtype):
        super().__init__()
        self.encoder = build.shot_encoder(config, device, dtype)
        self.decoder = build.shot_decoder(config, device, dtype)
        self.seed, self.warmup = config.seed, config.encoder_warmup_steps
        self.warmup_motion = config.warmup_trains_motion
        self.rates = (config.text_drop_rate, config.empty_text_rate, config.image_drop_rate)

    def forward(self, batch: dict, step: int) -> dict:
        device = self.encoder.visual_proj[0].weight.device
        clips = [turns[-1] for turns in batch["turns"]]
        first_frames = torch.stack([c["first_frame"] for c in clips]).to(device)
        drop = ConditionDrop.draw(sample_generators(self.seed, batch["uid"], 1), *self.rates)
        shots = self.encoder(first_frames, [c["action"] for c in clips], drop)
        scope = torch.tensor([c["motion_scope"] for c in clips], device=device)
        loss = self.decoder.diffusion_loss(
            batch["video"].to(device), shots, scope, sample_generators(self.seed, batch["uid"])
        )
        return {"loss": loss, **drop.fractions()}

    def before_optimizer_step(self, step: int) -> None:
        """Warm-up: the decoder waits (its grads dropped, so AdamW leaves it as it is), except its
        motion MLP with `warmup_trains_motion`, as the release's warm-up list (`flow`, E_a)."""
        if step >= self.warmup:
            return
        keep = {id(p) for p in self.decoder.motion_parameters()} if self.warmup_motion else set()
        for p in self.decoder.parameters():
            if id(p) not in keep:
                p.grad = None

    def adapters(self) -> dict:
        return {"decoder": (self.decoder.lora_state_dict(), self.decoder.lora_config())}

    def saved_tensors(self) -> dict:
        """The unconditional shot of this E_a, which guided sampling contrasts with."""
        with torch.no_grad():
            return {"unconditional_shot": self.encoder.unconditional()[0]}


def build_phase(config, device, dtype):
    catalog = ClipCatalog(config.shards, config.include_unusable)
    record_motion_levels(config, catalog)
    dataset = ShotDataset(
        catalog,
        clip_samples(catalog),
        (config.frame_height, config.frame_width),
        config.num_frames,
        with_video=True,
    )
    return EncoderPhase(config, device, dtype), dataset


if __name__ == "__main__":
    from trainer.phases.cli import main_for_phase

    raise SystemExit(main_for_phase("encoder"))
