"""Evaluating what the trainer made: `animegamer eval` (CLIP-I/T, DreamSim, ACC-F and MAE-F of
generated clips, `evaluate.py`) and the paper's MLLM-as-judge scores of a game's turns with a local
InternVL (`judge.py`)."""
