"""Captioning clips with InternVL: prompts in, typed caption columns out.

- parsing: the two answers into domain-checked values, and the game-turn instruction text
- images: the clip's frame grid and the protagonists' reference sheet
- engines: transformers, lmdeploy and OpenAI-compatible engines behind one interface
- cache: finished captions across runs
- film: captioning a film folder's shards (in this process or on Ray actors)

The stage itself is stages/caption.py; the prompts are prompts/*.txt.
"""
