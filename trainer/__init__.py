"""The AnimeGamer trainer: reads the clip shards the pipeline writes and trains, in three phases,
the shot encoder E_a with the CogVideoX decoder D_a (phase a, `encoder`), the next-game-state MLLM
(phase b, `mllm`) and the decoder's adaptation to the MLLM's predictions (phase c, `adapt`)."""

from core.compat import prepare_torchvision_import

# transformers' modelling code imports torchvision, whose only build here is a CUDA one. Made
# importable at its first lookup, not now: importing torch here (2 s) would make every command
# of the trainer (train, play, export, eval) wait that long even to report a bad argument.
prepare_torchvision_import()
