"""Shot decoder D_a: CogVideoX with E_a's shot representation in the text slot and the motion
scope added to the timestep embedding, adapted with LoRA on the 3D attention.

The motion scope goes through the same sinusoidal embedding as timesteps, then
Linear(inner -> motion_hidden) - SiLU - Linear(motion_hidden -> time_embed_dim) whose last layer
starts at zero, so at step 0 the pretrained decoder is unchanged. It rides in through the
transformer's `timestep_cond` argument into a wrapped time embedding.

Sampling follows the release's sampler config: a zero-terminal-SNR schedule with SNR shift 3
(the training schedule), 50 steps of stochastic DPM++ 2M (diffusers' CogVideoXDPMScheduler is
the release's VPSDEDPMPP2MSampler), and classifier-free guidance between the shot and the
unconditional shot with the release's DynamicCFG weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.models.embeddings import Timesteps
from peft import LoraConfig, get_peft_model_state_dict

from trainer.models.precision import train_in_fp32


class TimeEmbeddingWithMotion(nn.Module):
    """The pretrained timestep embedding plus the motion MLP's output (condition = sinusoid)."""

    def __init__(self, base: nn.Module, sinusoid_dim: int, hidden: int, out_dim: int):
        super().__init__()
        self.base = base
        self.motion = nn.Sequential(
            nn.Linear(sinusoid_dim, hidden), nn.SiLU(), nn.Linear(hidden, out_dim)
        )
        last = self.motion[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def _condition_dtype(self) -> torch.dtype:
        first = self.motion[0]
        assert isinstance(first, nn.Linear)
        return first.weight.dtype

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        embedding = self.base(sample)
        if condition is None:
            return embedding
        return embedding + self.motion(condition.to(self._condition_dtype())).to(embedding.dtype)


@dataclass(frozen=True)
class Guidance:
    """Classifier-free guidance: prediction = uncond + weight(t) (cond - uncond)."""

    scale: float
    schedule: str = "dynamic"
    exp: float = 5.0

    def weight(self, timestep: int, num_steps: int) -> float:
        """The release's DynamicCFG (and diffusers' use_dynamic_cfg) read the raw timestep t
        (999 .. 0), not the step index, so (N - t) / N is mostly negative and the weight
        oscillates between 1 and 1 + scale; kept as it is, since the release's decoder was
        tuned with it."""
        if self.schedule == "constant":
            return self.scale
        ramp = (num_steps - timestep) / num_steps
        # a negative base with a whole exponent is real (the release's exp is 5)
        power = ramp**self.exp if ramp >= 0 or self.exp == int(self.exp) else -((-ramp) ** self.exp)
        return 1.0 + self.scale * (1.0 - math.cos(math.pi * power)) / 2.0


def guidance_from(config) -> Guidance | None:
    """The configured guidance; None for a scale of 1, which the release samples unguided."""
    if config.guidance_scale == 1.0:
        return None
    return Guidance(config.guidance_scale, config.guidance_schedule, config.guidance_exp)


def sampling_scheduler(training_scheduler, sampler: str):
    """The sampler's scheduler on the training schedule (same betas, shift, zero terminal SNR)."""
    from diffusers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler

    kind = {"dpm++2m": CogVideoXDPMScheduler, "ddim": CogVideoXDDIMScheduler}[sampler]
    return kind.from_config(training_scheduler.config)


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
        train_adaln: bool = True,
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
        if train_adaln:
            for linear in self.adaln_modulations():
                train_in_fp32(linear)

    def adaln_modulations(self) -> list[nn.Module]:
        """Each block's two adaLN modulation layers (timestep + motion embedding -> shift, scale,
        gate of the video and text streams): the release's AdaLNMixin.adaLN_modulations, 12 x
        width outputs per block. The final layer's modulation is not among them, as in the
        release, whose list names `adaLN_modulations` only."""
        return [
            norm.linear
            for block in self.transformer.transformer_blocks
            for norm in (block.norm1, block.norm2)
        ]

    def motion_parameters(self) -> list[nn.Parameter]:
        """The motion MLP's weights (the release's `flow_embed`)."""
        return list(self.transformer.time_embedding.motion.parameters())

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
        unconditional: torch.Tensor | None = None,
        guidance: Guidance | None = None,
        sampler: str = "dpm++2m",
    ) -> torch.Tensor:
        """Sample shots: B x num_frames x H x W x 3 uint8.

        With `guidance`, each step also predicts for `unconditional` (one shot, broadcast) and
        mixes the two; without it, one conditional pass per step. The motion scope conditions
        both passes, as in the release.
        """
        if guidance is not None and unconditional is None:
            raise ValueError("guided sampling needs the unconditional shot")
        scheduler = sampling_scheduler(self.scheduler, sampler)
        scheduler.set_timesteps(steps, device=shots.device)
        latents = torch.randn(
            self._latent_shape(shots.shape[0], num_frames, size), generator=generator
        )
        latents = latents.to(shots.device) * scheduler.init_noise_sigma
        previous_x0 = None
        timesteps = scheduler.timesteps
        for index, t in enumerate(timesteps):
            velocity = self._guided_velocity(
                latents, shots, unconditional, t, motion_scope, guidance, steps
            )
            if sampler == "dpm++2m":
                back = timesteps[index - 1] if index > 0 else None
                latents, previous_x0 = scheduler.step(
                    velocity, previous_x0, t, back, latents, generator=generator, return_dict=False
                )
            else:
                latents = scheduler.step(velocity, t, latents, return_dict=False)[0]
        return self._decode(latents)

    def _guided_velocity(self, latents, shots, unconditional, t, motion_scope, guidance, steps):
        batch = shots.shape[0]
        if guidance is None:
            return self(latents, shots, t.expand(batch), motion_scope).float()
        both = torch.cat([unconditional.expand(batch, -1, -1).to(shots), shots])
        out = self(
            torch.cat([latents, latents]), both, t.expand(2 * batch), motion_scope.repeat(2)
        ).float()
        uncond, cond = out.chunk(2)
        return uncond + guidance.weight(int(t), steps) * (cond - uncond)

    def _latent_shape(self, batch: int, num_frames: int, size: tuple[int, int]) -> tuple:
        vae_config = self.vae.config
        spatial = 2 ** (len(vae_config.block_out_channels) - 1)
        frames = (num_frames - 1) // vae_config.temporal_compression_ratio + 1
        return (batch, frames, vae_config.latent_channels, size[0] // spatial, size[1] // spatial)

    def _decode(self, latents: torch.Tensor) -> torch.Tensor:
        vae_config = self.vae.config
        pixels = self.vae.decode(
            (latents / vae_config.scaling_factor).permute(0, 2, 1, 3, 4).to(self.vae.dtype)
        ).sample
        video = ((pixels.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        return video.permute(0, 2, 3, 4, 1)
