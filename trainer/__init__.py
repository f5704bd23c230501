"""The AnimeGamer trainer: reads the clip shards the pipeline writes and trains, in three phases,
the shot encoder E_a with the CogVideoX decoder D_a (phase a, `encoder`), the next-game-state MLLM
(phase b, `mllm`) and the decoder's adaptation to the MLLM's predictions (phase c, `adapt`)."""

from core.compat import ensure_torchvision_importable

# transformers' modelling code imports torchvision, whose only build here is a CUDA one.
ensure_torchvision_importable()
