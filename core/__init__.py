"""The base every other package builds on: the clip record, the shard schema, video helpers,
atomic file writes, shard reading and writing, typed settings, the device picker and the film
folder's layout. It imports no other package of this project (tests/test_layering.py checks)."""
