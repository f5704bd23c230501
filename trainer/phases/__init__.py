"""The trainer's three phases: (a) the shot encoder with the decoder (`encoder.py`), (b) the
next-game-state MLLM (`mllm.py`), (c) the decoder's adaptation to the MLLM (`adapt.py`); the one
training loop every phase runs (`loop.py`) and `animegamer train` (`cli.py`)."""
