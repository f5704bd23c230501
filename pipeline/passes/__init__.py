"""The folder-level passes: work over every film of an output folder once the films are cut. The
quality pass (`quality`: every clip decided with the folder's thresholds), the near-duplicate
search over perceptual hashes (`duplicates`, with its exact scan in `bitscan` and
`bitscan_kernel`) and captioning a folder already cut (`caption_films`). They read the data room
and use the executors; the running room schedules them."""
