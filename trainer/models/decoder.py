"""Shot decoder D_a: CogVideoX with E_a's shot representation in the text slot and the motion
scope added to the timestep embedding, adapted with LoRA on the 3D attention.

The motion scope goes through the same sinusoidal embedding as timesteps, then
Linear(inner -> motion_hidden) - SiLU - Linear(motion_hidden -> time_embed_dim) whose last layer
starts at zero, so at step 0 the pretrained decoder is unchanged. It rides in through the
transformer's `timestep_cond` argument into a wrapped time embedding.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.models.embeddings import Timesteps
from peft import LoraConfig, get_peft_model_state_dict


class TimeEmbeddingWithMotion(nn.Module):
    """The pretrained timestep embedding plus the motion MLP's output (condition = sinusoid)."""

    def __init__(self, base: nn.Module, sinusoid_dim: int, hidden: int, out_dim: int):
        super().__init__()
        self.base = base
        self.motion = nn.Sequential(
            nn.Linear(sinusoid_dim, hidden), nn.SiLU(), nn.Linear(hidden, out_dim)
        )
        nn.init.zeros_(self.motion[-1].weight)
        nn.init.zeros_(self.motion[-1].bias)

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        embedding = self.base(sample)
        if condition is None:
            return embedding
        return embedding + self.motion(condition.to(self.motion[0].weight.dtype)).to(
            embedding.dtype
        )


class ShotDecoder(nn.Module):
    def __init__(
        self,
        transformer,
        vae,
        scheduler,
        shot_dim: int,
        lora_rank: int,
        lora_alpha: int,
        lora_targets: list[str],
        motion_hidden: int,
    ):
        super().__init__()
        config = transformer.config
        if config.use_rotary_positional_embeddings:
            raise ValueError(
                "this decoder supports CogVideoX-2B-style transformers (sinusoidal positions); "
                "the checkpoint uses rotary embeddings (CogVideoX-5B)"
            )
        inner = config.num_attention_heads * config.attention_head_dim
        if shot_dim != inner:
            raise ValueError(
                f"shot representation width {shot_dim} must equal the transformer width {inner}"
            )
        if config.text_embed_dim != inner:
            # E_a writes straight into the transformer's width (226 x 1920 for 2B), so the T5 -> width
            # projection of the text slot is not used.
            transformer.patch_embed.text_proj = nn.Identity()
        transformer.add_adapter(
            LoraConfig(
                r=lora_rank,
                lora_alpha=lora_alpha,
                target_modules=lora_targets,
                init_lora_weights=True,
            )
        )
        for name, param in transformer.named_parameters():
            if (
                "lora_" in name
            ):  # trained weights stay fp32 under a bf16 backbone (peft casts inputs)
                param.data = param.data.float()
        self.motion_sinusoid = Timesteps(inner, config.flip_sin_to_cos, config.freq_shift)
        transformer.time_embedding = TimeEmbeddingWithMotion(
            transformer.time_embedding, inner, motion_hidden, config.time_embed_dim
        )
        self.transformer, self.vae, self.scheduler = transformer, vae, scheduler
        self.vae.requires_grad_(False)

    @property
    def text_slot(self) -> int:
        return self.transformer.config.max_text_seq_length

    def lora_state_dict(self) -> dict:
        return get_peft_model_state_dict(self.transformer)

    def lora_config(self) -> LoraConfig:
        return self.transformer.peft_config["default"]

    def forward(self, noisy_latents, shots, timesteps, motion_scope) -> torch.Tensor:
        """Predicted velocity for B x F x C x h x w latents."""
        dtype = next(self.transformer.parameters()).dtype
        motion = self.motion_sinusoid(motion_scope.float())
        return self.transformer(
            hidden_states=noisy_latents.to(dtype),
            encoder_hidden_states=shots.to(dtype),
            timestep=timesteps,
            timestep_cond=motion,
            return_dict=False,
        )[0]

    def diffusion_loss(
        self,
        video: torch.Tensor,
        shots: torch.Tensor,
        motion_scope: torch.Tensor,
        generators: list[torch.Generator],
    ) -> torch.Tensor:
        """v-prediction MSE on one random timestep per sample; video: B x F x 3 x H x W uint8.

        Each sample draws its timestep and noise from its own generator, so its loss does not
        depend on the batch it is in (resume and DDP reproduce single-process runs).
        """
        latents = self.encode(video, generators)
        steps = self.scheduler.config.num_train_timesteps
        timesteps = torch.stack([torch.randint(0, steps, (), generator=g) for g in generators]).to(
            latents.device
        )
        noise = torch.stack([torch.randn(latents.shape[1:], generator=g) for g in generators]).to(
            latents
        )
        noisy = self.scheduler.add_noise(latents, noise, timesteps)
        target = self.scheduler.get_velocity(latents, noise, timesteps)
        predicted = self(noisy, shots, timesteps, motion_scope)
        return F.mse_loss(predicted.float(), target.float())

    @torch.no_grad()
    def encode(self, video: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """uint8 B x F x 3 x H x W -> scaled latents B x f x C x h x w (a sample of the posterior)."""
        pixels = (video.to(self.vae.dtype) / 127.5 - 1.0).permute(0, 2, 1, 3, 4)
        posterior = self.vae.encode(pixels).latent_dist
        eps = torch.stack([torch.randn(posterior.mean.shape[1:], generator=g) for g in generators])
        latents = posterior.mean + posterior.std * eps.to(posterior.mean)
        return (latents * self.vae.config.scaling_factor).permute(0, 2, 1, 3, 4).float()

    @torch.no_grad()
    def generate(
        self,
        shots: torch.Tensor,
        motion_scope: torch.Tensor,
        num_frames: int,
        size: tuple[int, int],
        steps: int = 50,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample a shot: B x num_frames x H x W x 3 uint8 (DDIM, no classifier-free guidance)."""
        vae_config = self.vae.config
        spatial = 2 ** (len(vae_config.block_out_channels) - 1)
        frames = (num_frames - 1) // vae_config.temporal_compression_ratio + 1
        shape = (
            shots.shape[0],
            frames,
            vae_config.latent_channels,
            size[0] // spatial,
            size[1] // spatial,
        )
        latents = torch.randn(shape, generator=generator).to(shots.device)
        self.scheduler.set_timesteps(steps, device=shots.device)
        for t in self.scheduler.timesteps:
            velocity = self(latents, shots, t.expand(shots.shape[0]), motion_scope).float()
            latents = self.scheduler.step(velocity, t, latents, return_dict=False)[0]
        pixels = self.vae.decode(
            (latents / vae_config.scaling_factor).permute(0, 2, 1, 3, 4).to(self.vae.dtype)
        ).sample
        video = ((pixels.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        return video.permute(0, 2, 3, 4, 1)
