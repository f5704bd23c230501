"""The trainer's parts at the paper's real sizes, built on the meta device (shapes, no weights):
CLIP ViT-B/16 + T5 v1.1 XXL give E_a 30 + 196 = 226 tokens x 1920, which is CogVideoX-2B's text
slot, and Mistral-7B's projections map 1920 <-> 4096."""

from __future__ import annotations

import pytest
import torch

import trainer  # noqa: F401  (makes torchvision importable before transformers)

# The released checkpoints' config.json values: one place, shared with the GPU benchmark.
from bench.gpu.models import CLIP_VIT_B16, T5_V11_XXL
from trainer.models.encoder import ShotEncoder
from trainer.shared.tiny import mistral_tokenizer

# The decoder and the MLLM (diffusers, peft, transformers: seconds) are imported in the tests
# that build them, not at collection, which every test worker pays.


@pytest.mark.slow
def test_real_size_encoder_fills_the_cogvideox_2b_text_slot_and_the_decoder_takes_it():
    from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel
    from transformers import CLIPVisionConfig, CLIPVisionModel, T5Config, T5EncoderModel

    from trainer.models.decoder import ShotDecoder

    with torch.device("meta"):
        clip = CLIPVisionModel(CLIPVisionConfig(**CLIP_VIT_B16))
        t5 = T5EncoderModel(T5Config(**T5_V11_XXL))
        transformer = CogVideoXTransformer3DModel()
        encoder = ShotEncoder(clip, t5, mistral_tokenizer(), out_dim=1920, text_tokens=30)
        assert encoder.num_tokens == transformer.config.max_text_seq_length == 226
        visual = clip(
            pixel_values=torch.zeros(1, 3, 224, 224), output_hidden_states=True
        ).hidden_states[-2][:, 1:]
        shot = torch.cat(
            [encoder.text_proj(torch.zeros(1, 30, 4096)), encoder.visual_proj(visual)], dim=1
        )
        assert shot.shape == (1, 226, 1920)
        decoder = ShotDecoder(
            transformer,
            AutoencoderKLCogVideoX(),
            None,
            1920,
            64,
            64,
            ["to_q", "to_k", "to_v", "to_out.0"],
            motion_hidden=512,
        )
        # 17 frames of 480 x 720 are 5 x 16 x 60 x 90 latents
        velocity = decoder(
            torch.zeros(1, 5, 16, 60, 90), shot, torch.tensor([500]), torch.tensor([2.5])
        )
        assert velocity.shape == (1, 5, 16, 60, 90)
    motion = decoder.transformer.time_embedding.motion
    assert (motion[0].in_features, motion[0].out_features, motion[2].out_features) == (
        1920,
        512,
        512,
    )
    lora_a = decoder.transformer.transformer_blocks[0].attn1.to_q.lora_A["default"]
    assert lora_a.out_features == 64


def test_real_size_mllm_projects_between_the_shot_and_mistral_7b():
    from transformers import MistralConfig, MistralForCausalLM

    from trainer.models.mllm import GameStateModel

    with torch.device("meta"):
        llm = MistralForCausalLM(MistralConfig())  # Mistral-7B: hidden 4096, 32 layers
        model = GameStateModel(
            llm,
            mistral_tokenizer(),
            1920,
            226,
            32,
            32,
            0.05,
            ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        )
    assert model.queries.shape == (226, 4096)
    assert [(m.in_features, m.out_features) for m in model.input_proj[::2]] == [
        (1920, 4096),
        (4096, 4096),
    ]
    assert [(m.in_features, m.out_features) for m in model.output_proj[::2]] == [
        (4096, 1920),
        (1920, 1920),
    ]
    lora = model.llm.base_model.model.model.layers[0].self_attn.q_proj
    assert lora.r["default"] == 32 and lora.scaling["default"] == 1.0
