"""Captioning clips with InternVL: prompts in, typed caption columns out.

- stage: the caption stage, its settings and the caption statuses
- parsing: the two answers into domain-checked values, and the game-turn instruction text
- images: the clip's frame grid and the protagonists' reference sheet
- engines: transformers, lmdeploy and OpenAI-compatible engines behind one interface
- cache: finished captions across runs

Captioning a film folder's shards (in this process or on Ray actors) is orchestration and lives
in pipeline/passes/caption_films.py; the prompts are prompts/*.txt.
"""
