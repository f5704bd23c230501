"""What leaves the trainer: `animegamer play` (a game played turn by turn with the trained parts,
`play.py`) and `animegamer export` (the clip shards in other trainers' layouts, `export.py`)."""
