"""The three model parts: shot encoder E_a, shot decoder D_a, next-game-state MLLM."""
