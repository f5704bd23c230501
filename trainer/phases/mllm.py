"""Phase (b): next game state prediction over game sequences, with E_a frozen.

Every turn's shot is represented by the phase (a) E_a (first frame + motion description); the
history's shots are the MLLM's inputs and the target's shot is what its query tokens must predict,
together with the target's state tokens.
Run: `python -m trainer.phases.mllm --config trainer/configs/mllm.yaml --shards DATASET`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from peft import get_peft_model_state_dict

from trainer.models import build
from trainer.shared.data import game_sequence_dataset


class MllmPhase(nn.Module):
    may_skip_parameters = True  # a batch of one-turn sequences never uses the input projection

    def __init__(self, config, device, dtype):
        super().__init__()
        build.check_same_shape(config, config.encoder_checkpoint, build.ENCODER_SHAPE)
        encoder = build.shot_encoder(config, device, dtype)
        self.encoder = build.frozen_from_checkpoint(encoder, config.encoder_checkpoint, "encoder.")
        self.mllm = build.game_state_model(config, device, dtype)
        self.mse_weight, self.cosine_weight = config.mse_weight, config.cosine_weight

    def forward(self, batch: dict, step: int) -> dict:
        shots = [encode_turns(self.encoder, turns) for turns in batch["turns"]]
        sequences = [self.mllm.prompts.sequence(turns) for turns in batch["turns"]]
        return self.mllm.loss(
            sequences,
            [s[:-1] for s in shots],
            torch.stack([s[-1] for s in shots]),
            self.mse_weight,
            self.cosine_weight,
        )

    def adapters(self) -> dict:
        llm = self.mllm.llm
        # Fully trained embeddings, lm_head and norms travel as peft modules_to_save; with
        # train_embeddings false the new tokens' rows travel as trainable tokens, and the full
        # matrices (2 x 131M weights for Mistral-7B) need not be copied into the adapter.
        weights = get_peft_model_state_dict(llm, save_embedding_layers=False)
        return {"mllm": (weights, llm.peft_config["default"], self.mllm.tokenizer)}


@torch.no_grad()
def encode_turns(encoder, turns: list[dict]) -> torch.Tensor:
    """E_a representations of a sequence's shots: T x tokens x width."""
    device = encoder.visual_proj[0].weight.device
    first_frames = torch.stack([t["first_frame"] for t in turns]).to(device)
    return encoder(first_frames, [t["action"] for t in turns])


def build_phase(config, device, dtype):
    return MllmPhase(config, device, dtype), game_sequence_dataset(config, with_video=False)


if __name__ == "__main__":
    from trainer.phases.cli import main_for_phase

    raise SystemExit(main_for_phase("mllm"))
