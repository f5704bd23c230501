"""The AnimeGamer trainer: reads the clip shards the pipeline writes and trains, in three phases,
the shot encoder E_a with the CogVideoX decoder D_a (phase a, `encoder`), the next-game-state MLLM
(phase b, `mllm`) and the decoder's adaptation to the MLLM's predictions (phase c, `adapt`).

Its rooms, each importing only the rooms below it (tests/test_layering.py):
- `phases/`: the three phases, the one training loop they run and `animegamer train`;
- `evaluation/`: `animegamer eval` and the MLLM-as-judge;
- `delivery/`: what leaves the trainer: `animegamer play` and `animegamer export`;
- `models/`: the three model parts, and building them from settings and checkpoints;
- `shared/`: the machinery every room uses: settings, shards to batches, the game prompt,
  checkpoints, processes, the backbones' loaders, tiny backbones for tests;
- `configs/`: the phases' YAML settings.

The modules' paths before the rooms (`trainer.data`, `python -m trainer.cli`, ...) still work:
`OLD_PATHS` below.
"""

import sys

from core.compat import prepare_torchvision_import
from core.moved import keep_old_paths

# where each module of the flat trainer/ went (issue 37): old paths keep working for users,
# notebooks and scripts; the project's own code imports the new ones
OLD_PATHS = {
    "trainer.config": "trainer.shared.config",
    "trainer.data": "trainer.shared.data",
    "trainer.prompt": "trainer.shared.prompt",
    "trainer.checkpoint": "trainer.shared.checkpoint",
    "trainer.distributed": "trainer.shared.distributed",
    "trainer.backbones": "trainer.shared.backbones",
    "trainer.tiny": "trainer.shared.tiny",
    "trainer.build": "trainer.models.build",
    "trainer.loop": "trainer.phases.loop",
    "trainer.train_encoder": "trainer.phases.encoder",
    "trainer.train_mllm": "trainer.phases.mllm",
    "trainer.train_adapt": "trainer.phases.adapt",
    "trainer.cli": "trainer.phases.cli",
    "trainer.evaluate": "trainer.evaluation.evaluate",
    "trainer.judge": "trainer.evaluation.judge",
    "trainer.play": "trainer.delivery.play",
    "trainer.export": "trainer.delivery.export",
}
keep_old_paths(OLD_PATHS)

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
