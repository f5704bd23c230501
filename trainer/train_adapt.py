"""Phase (c): adapt the decoder to the MLLM's predicted shot representations.

The MLLM (phase b) and E_a (phase a, for the history's shots) are frozen; the decoder starts from
its phase (a) LoRA and motion MLP and learns to render the target clip from the MLLM's prediction.
Run: `python -m trainer.train_adapt --config trainer/configs/adapt.yaml --shards DATASET`.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer import build, checkpoint
from trainer.data import game_sequence_dataset
from trainer.loop import sample_generators
from trainer.train_mllm import encode_turns


class AdaptPhase(nn.Module):
    def __init__(self, config, device, dtype):
        super().__init__()
        encoder = build.shot_encoder(config, device, dtype)
        self.encoder = build.frozen_from_checkpoint(encoder, config.encoder_checkpoint, "encoder.")
        self.mllm, _ = build.trained_mllm(config.mllm_checkpoint, device, dtype)
        self.decoder = build.shot_decoder(config, device, dtype)
        weights = checkpoint.load(config.encoder_checkpoint)["trainable"]
        checkpoint.restore_trainable(self, weights, prefix="decoder.", source=config.encoder_checkpoint)
        self.seed = config.seed

    def forward(self, batch: dict, step: int) -> dict:
        device = self.encoder.visual_proj[0].weight.device
        with torch.no_grad():
            shots = [encode_turns(self.encoder, turns) for turns in batch["turns"]]
            sequences = [self.mllm.prompts.sequence(turns, target_states=False) for turns in batch["turns"]]
            _, predicted, _ = self.mllm(sequences, [s[:-1] for s in shots])
        scope = torch.tensor([turns[-1]["motion_scope"] for turns in batch["turns"]], device=device)
        loss = self.decoder.diffusion_loss(batch["video"].to(device), predicted, scope,
                                           sample_generators(self.seed, batch["uid"]))
        return {"loss": loss}

    def adapters(self) -> dict:
        return {"decoder": (self.decoder.lora_state_dict(), self.decoder.lora_config())}


def build_phase(config, device, dtype):
    return AdaptPhase(config, device, dtype), game_sequence_dataset(config, with_video=True)


if __name__ == "__main__":
    from trainer.cli import main_for_phase

    raise SystemExit(main_for_phase("adapt"))
