"""The next-game-state MLLM: Mistral with LoRA, shot slots and learnable query tokens.

History shots enter through the input projection (shot width -> LLM width); the target turn holds
`num_queries` learnable query embeddings whose last hidden states go through the output projection
back to shot width: that is the predicted shot representation, compared with E_a's representation
of the real target shot. The paper's special tokens are added to the tokenizer. As the release,
the whole embedding and lm_head and every RMSNorm train beside the LoRA (peft modules_to_save, in
fp32); narrowed, only the new tokens' rows train (peft trainable tokens).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.utils import ModulesToSaveWrapper

from trainer.models.precision import train_in_fp32
from trainer.shared.prompt import (
    IGNORE,
    PromptBuilder,
    add_game_tokens,
    additive_mask,
    attention_allowed,
    pad_batch,
)


class GameStateModel(nn.Module):
    def __init__(
        self,
        llm,
        tokenizer,
        shot_dim: int,
        num_queries: int,
        lora_rank: int,
        lora_alpha: int,
        lora_dropout: float,
        lora_targets: list[str],
        prompt_format: str = "paper",
        train_embeddings: bool = True,
        train_norms: bool = True,
    ):
        super().__init__()
        new_ids = add_game_tokens(tokenizer, num_queries, prompt_format)
        llm.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        self.llm = get_peft_model(
            llm,
            LoraConfig(
                r=lora_rank,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=lora_targets,
                task_type="CAUSAL_LM",
                **fully_trained(new_ids, train_embeddings, train_norms),
            ),
        )
        for module in self.llm.modules():
            if isinstance(module, ModulesToSaveWrapper):
                train_in_fp32(module.modules_to_save["default"])
        hidden = llm.config.hidden_size
        self.tokenizer, self.num_queries, self.shot_dim = tokenizer, num_queries, shot_dim
        self.prompts = PromptBuilder(tokenizer, num_queries, prompt_format)
        self.queries = nn.Parameter(torch.randn(num_queries, hidden) * llm.config.initializer_range)
        self.input_proj = nn.Sequential(
            nn.Linear(shot_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden)
        )
        self.output_proj = nn.Sequential(
            nn.Linear(hidden, shot_dim), nn.GELU(), nn.Linear(shot_dim, shot_dim)
        )

    def forward(self, sequences, history_shots: list[torch.Tensor]):
        """Logits and predicted target shots for tokenised sequences.

        history_shots[b]: T_b x num_queries x shot_dim, one per history turn of sequence b.
        Returns (logits B x L x V, predicted shots B x num_queries x shot_dim, labels B x L).
        """
        device = self.queries.device
        ids, labels, lengths = pad_batch(sequences, self.tokenizer.pad_token_id)
        ids, labels = ids.to(device), labels.to(device)
        embeds = self.llm.get_input_embeddings()(ids)
        embeds = torch.stack(
            [self._fill_slots(embeds[b], seq, history_shots[b]) for b, seq in enumerate(sequences)]
        )
        allowed = attention_allowed(
            lengths, [s.query_start for s in sequences], self.num_queries, ids.shape[1]
        )
        out = self.llm(
            inputs_embeds=embeds,
            attention_mask=additive_mask(allowed, embeds.dtype).to(device),
            position_ids=torch.arange(ids.shape[1], device=device)[None].expand_as(ids),
            output_hidden_states=True,
            use_cache=False,
        )
        last = out.hidden_states[-1]
        queries = torch.stack(
            [
                last[b, s.query_start : s.query_start + self.num_queries]
                for b, s in enumerate(sequences)
            ]
        )
        return out.logits, self.output_proj(queries.float()), labels

    def _fill_slots(self, embeds: torch.Tensor, seq, shots: torch.Tensor) -> torch.Tensor:
        """Replace slot embeddings: history slots by projected shots, the target's by the queries."""
        pieces, cursor = [], 0
        filled = [
            (start, self.input_proj(shot.float())) for start, shot in zip(seq.history_slots, shots)
        ]
        filled.append((seq.query_start, self.queries))
        for start, values in sorted(filled, key=lambda item: item[0]):
            pieces += [embeds[cursor:start], values.to(embeds.dtype)]
            cursor = start + self.num_queries
        pieces.append(embeds[cursor:])
        return torch.cat(pieces)

    def loss(
        self, sequences, history_shots, target_shots, mse_weight: float, cosine_weight: float
    ) -> dict:
        logits, predicted, labels = self(sequences, history_shots)
        ce = state_cross_entropy(logits, labels)
        mse = F.mse_loss(predicted, target_shots.float())
        cosine = 1 - F.cosine_similarity(predicted, target_shots.float(), dim=-1).mean()
        total = ce + mse_weight * mse + cosine_weight * cosine
        return {"loss": total, "ce": ce.detach(), "mse": mse.detach(), "cosine": cosine.detach()}


# The release's modules_to_save (configs/clm_models/mistral-7b.yaml): every RMSNorm of the LLM.
NORMS = ["input_layernorm", "post_attention_layernorm", "norm"]


def fully_trained(new_ids: list[int], embeddings: bool, norms: bool) -> dict:
    """LoraConfig arguments for what trains beside the LoRA: the whole embedding and lm_head (the
    release) or only the new tokens' rows, and the RMSNorms."""
    whole = (["embed_tokens", "lm_head"] if embeddings else []) + (NORMS if norms else [])
    rows = (
        {}
        if embeddings
        else {"trainable_token_indices": {"embed_tokens": new_ids, "lm_head": new_ids}}
    )
    return {"modules_to_save": whole or None, **rows}


def state_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token CE averaged over each sequence's labelled tokens, then over sequences: every
    sample weighs the same, whatever its tokens or batch (so 2 ranks x 1 equals 1 rank x 2)."""
    targets = labels[:, 1:]
    per_token = F.cross_entropy(
        logits[:, :-1].transpose(1, 2).float(), targets, ignore_index=IGNORE, reduction="none"
    )
    counts = (targets != IGNORE).sum(dim=1).clamp(min=1)
    return (per_token.sum(dim=1) / counts).mean()
