"""The text of a game sequence, token by token, and the masks over it.

A turn is `[INST] instruction [/INST]<VS>` + one slot per shot token + `</VS>` + the states
`<MS>level</MS><ST>stamina</ST><SC>social</SC><ET>entertainment</ET>` + end of sequence. History
turns' slots carry their shot representations (through the input projection); the target turn's
slots are the learnable query tokens, whose hidden states become the predicted shot. Only the
target's state tokens are trained with cross-entropy.

Pieces are tokenised one by one so each slot's position is known exactly; play builds its prompts
with the same code, so training and playing see the same token stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

STATE_TAGS = (("motion_level", "MS"), ("stamina", "ST"), ("social", "SC"), ("entertainment", "ET"))
STATE_VALUES = {
    "motion_level": (1, 2, 3, 4, 5),
    "stamina": (-1, 1),
    "social": (0, 1),
    "entertainment": (0, 1),
}
IGNORE = -100


def special_tokens(num_queries: int) -> list[str]:
    tags = [t for _, tag in STATE_TAGS for t in (f"<{tag}>", f"</{tag}>")]
    return tags + ["<VS>", "</VS>"] + [f"<ANIME_{i}>" for i in range(num_queries)]


def add_game_tokens(tokenizer, num_queries: int) -> list[int]:
    """Add the special tokens to a tokenizer (idempotent); return their ids."""
    tokenizer.add_special_tokens(
        {"additional_special_tokens": special_tokens(num_queries)},
        replace_extra_special_tokens=False,
    )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.unk_token or tokenizer.eos_token
    return tokenizer.convert_tokens_to_ids(special_tokens(num_queries))


def state_text(states: dict) -> str:
    return "".join(f"<{tag}>{states[name]}</{tag}>" for name, tag in STATE_TAGS)


def parse_states(text: str) -> dict:
    """Read `<MS>3</MS>...` back; a missing or malformed field is None."""
    found = {}
    for name, tag in STATE_TAGS:
        match = re.search(rf"<{tag}>\s*(-?)\s*(\d+)\s*</{tag}>", text)  # decoders may space "- 1"
        found[name] = int(match.group(1) + match.group(2)) if match else None
    return found


@dataclass
class Sequence:
    """One tokenised game sequence."""

    input_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    history_slots: list[int] = field(default_factory=list)
    """Start position of each history turn's shot slots, in turn order."""
    query_start: int = -1


class PromptBuilder:
    def __init__(self, tokenizer, num_queries: int):
        self.tokenizer, self.num_queries = tokenizer, num_queries
        self.slot_ids = tokenizer.convert_tokens_to_ids(
            [f"<ANIME_{i}>" for i in range(num_queries)]
        )
        self.eos = tokenizer.eos_token_id
        self.bos = tokenizer.bos_token_id

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def sequence(self, turns: list[dict], target_states: bool = True) -> Sequence:
        """History turns (with states) then the target turn; the target's states are labelled
        when `target_states`, and left out (for play to generate) otherwise."""
        seq = Sequence()
        self._add(seq, [self.bos] if self.bos is not None else [], trained=False)
        for index, turn in enumerate(turns):
            is_target = index == len(turns) - 1
            self._add(
                seq,
                self.ids(f"[INST] {turn['instruction']} [/INST]") + self.ids("<VS>"),
                trained=False,
            )
            if is_target:
                seq.query_start = len(seq.input_ids)
            else:
                seq.history_slots.append(len(seq.input_ids))
            self._add(seq, self.slot_ids + self.ids("</VS>"), trained=False)
            if not is_target:
                self._add(seq, self.ids(state_text(turn)) + [self.eos], trained=False)
            elif target_states:
                self._add(seq, self.ids(state_text(turn)) + [self.eos], trained=True)
        return seq

    @staticmethod
    def _add(seq: Sequence, ids: list[int], trained: bool) -> None:
        seq.input_ids.extend(ids)
        seq.labels.extend(ids if trained else [IGNORE] * len(ids))


def pad_batch(
    sequences: list[Sequence], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids and labels, and the true lengths."""
    length = max(len(s.input_ids) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    labels = torch.full((len(sequences), length), IGNORE, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq.input_ids)] = torch.tensor(seq.input_ids)
        labels[row, : len(seq.labels)] = torch.tensor(seq.labels)
    return ids, labels, torch.tensor([len(s.input_ids) for s in sequences])


def attention_allowed(
    lengths: torch.Tensor, query_starts: list[int], num_queries: int, length: int
) -> torch.Tensor:
    """B x L x L booleans (True: the row's token may attend to the column's token).

    Causal over the sequence; within the target's query block every query sees every other (the
    block is bidirectional); padding is never attended to (a padding row sees only itself, which
    keeps softmax finite).
    """
    positions = torch.arange(length)
    causal = positions[None, :] <= positions[:, None]
    allowed = causal[None].repeat(len(lengths), 1, 1)
    for row, (size, start) in enumerate(zip(lengths.tolist(), query_starts)):
        if start >= 0:
            allowed[row, start : start + num_queries, start : start + num_queries] = True
        allowed[row, :, size:] = False
        allowed[row, size:, :] = False
        allowed[row, positions[size:], positions[size:]] = True
    return allowed


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """B x 1 x L x L float mask (0 or the dtype's minimum) that attention adds to its scores."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]
