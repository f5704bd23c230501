"""`make bench-gpu` (`python -m bench.gpu`): every GPU path at real size with random weights, one
table (issue 14; docs/gpu.md). One module per thing measured:

- `memflow.py`: MemFlow's pairs/s (the motion stage's backend, clips in lockstep);
- `training.py`: the trainer's phase (a) and (b) steps, with their MFU (`flops.py`);
- `captioning.py`: the caption engines on the sample film's clips;
- `transnet.py`: TransNetV2's frames/s;

beside them `models.py` (the random-weight models at the released sizes), `common.py` (settings,
guarded parts, GPU memory) and `cli.py`, the driver (arguments, the table, the JSON report).
"""
