"""Phase (c): adapt the decoder to the MLLM's predicted shot representations.

The MLLM (phase b) and E_a (phase a, for the history's shots) are frozen; the decoder starts from
its phase (a) LoRA and motion MLP and learns to render the target clip from the MLLM's prediction.
With `shot_drop_rate` a sample's prediction is replaced by E_a's unconditional shot, so the
adapted decoder keeps the unconditional prediction guidance needs. (In the release this phase
feeds the MLLM output past the conditioner, so its dropout never acts; see docs/training.md.)
Run: `python -m trainer.phases.adapt --config trainer/configs/adapt.yaml --shards DATASET`.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.models import build
from trainer.phases.loop import sample_generators
from trainer.phases.mllm import encode_turns
from trainer.shared import checkpoint
from trainer.shared.data import game_sequence_dataset


class AdaptPhase(nn.Module):
    def __init__(self, config, device, dtype):
        super().__init__()
        build.check_same_shape(
            config, config.encoder_checkpoint, build.ENCODER_SHAPE + build.DECODER_SHAPE
        )
        encoder = build.shot_encoder(config, device, dtype)
        self.encoder = build.frozen_from_checkpoint(encoder, config.encoder_checkpoint, "encoder.")
        self.mllm, mllm_config = build.trained_mllm(config.mllm_checkpoint, device, dtype)
        _check_same_encoder(
            config.encoder_checkpoint, mllm_config.encoder_checkpoint, config.mllm_checkpoint
        )
        self.decoder = build.shot_decoder(config, device, dtype)
        weights = checkpoint.load(config.encoder_checkpoint)["trainable"]
        checkpoint.restore_trainable(
            self, weights, prefix="decoder.", source=config.encoder_checkpoint
        )
        self.seed, self.shot_drop_rate = config.seed, config.shot_drop_rate

    def forward(self, batch: dict, step: int) -> dict:
        device = self.encoder.visual_proj[0].weight.device
        with torch.no_grad():
            shots = [encode_turns(self.encoder, turns) for turns in batch["turns"]]
            sequences = [
                self.mllm.prompts.sequence(turns, target_states=False) for turns in batch["turns"]
            ]
            _, predicted, _ = self.mllm(sequences, [s[:-1] for s in shots])
            dropped = [
                bool(torch.rand((), generator=g) < self.shot_drop_rate)
                for g in sample_generators(self.seed, batch["uid"], 1)
            ]
            keep = torch.tensor([0.0 if d else 1.0 for d in dropped], device=device)[:, None, None]
            predicted = keep * predicted + (1 - keep) * self.encoder.unconditional().to(predicted)
        scope = torch.tensor([turns[-1]["motion_scope"] for turns in batch["turns"]], device=device)
        loss = self.decoder.diffusion_loss(
            batch["video"].to(device), predicted, scope, sample_generators(self.seed, batch["uid"])
        )
        return {"loss": loss, "drop_shot": torch.tensor(sum(dropped) / len(dropped))}

    def adapters(self) -> dict:
        return {"decoder": (self.decoder.lora_state_dict(), self.decoder.lora_config())}

    def saved_tensors(self) -> dict:
        """The unconditional shot of the frozen E_a, which guided sampling contrasts with."""
        with torch.no_grad():
            return {"unconditional_shot": self.encoder.unconditional()[0]}


def _check_same_encoder(ours: str, mllms: str, mllm_checkpoint: str) -> None:
    """The MLLM learned to predict one E_a's shots; the decoder must be adapted on that E_a."""
    from pathlib import Path

    if (
        Path(ours).exists()
        and Path(mllms).exists()
        and Path(ours).resolve() != Path(mllms).resolve()
    ):
        raise ValueError(
            f"{mllm_checkpoint}: its MLLM was trained on the shot encoder of {mllms}, "
            f"but this run's encoder_checkpoint is {ours}"
        )


def build_phase(config, device, dtype):
    return AdaptPhase(config, device, dtype), game_sequence_dataset(config, with_video=True)


if __name__ == "__main__":
    from trainer.phases.cli import main_for_phase

    raise SystemExit(main_for_phase("adapt"))
