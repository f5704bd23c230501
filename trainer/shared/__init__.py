"""The trainer's shared machinery, which every other room of trainer/ uses and which imports none of
them: the phases' settings (`config.py`), shard files to training batches (`data.py`), a game
sequence's tokens (`prompt.py`), checkpoints and LoRA adapters (`checkpoint.py`), one process or
many (`distributed.py`), loading the pretrained backbones (`backbones.py`) and tiny random-weight
backbones for tests (`tiny.py`)."""
