"""The AnimeGamer trainer: reads the clip shards the pipeline writes and trains, in three phases,
the shot encoder E_a with the CogVideoX decoder D_a (phase a, `encoder`), the next-game-state MLLM
(phase b, `mllm`) and the decoder's adaptation to the MLLM's predictions (phase c, `adapt`)."""

import sys

from core.compat import prepare_torchvision_import

# transformers' modelling code imports torchvision, whose only build here is a CUDA one. Made
# importable at its first lookup, not now: importing torch here (2 s) would make every command
# of the trainer (train, play, export, eval) wait that long even to report a bad argument.
prepare_torchvision_import()

# bitsandbytes is installed (a GPU wheel of requirements.lock) but nothing here uses it. peft and
# transformers import it whenever it is installed, and it imports torch's inductor compiler on
# the way: 1.5-2.5 CPU-s at the start of every trainer command and test worker that builds a
# part. Marked absent (find_spec answers None, an import raises ImportError) unless something
# already imported it, so peft and transformers take their paths without it.
sys.modules.setdefault("bitsandbytes", None)  # type: ignore[arg-type]
