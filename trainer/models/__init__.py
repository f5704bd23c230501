"""The three model parts: shot encoder E_a (`encoder.py`), shot decoder D_a (`decoder.py`),
next-game-state MLLM (`mllm.py`), which backbone modules keep fp32 weights (`precision.py`), and
building the parts from settings, backbones and checkpoints (`build.py`)."""
