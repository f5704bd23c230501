"""Running films: the runner (`runner`: films in, the folder passes after them), the scheduler that
keeps several films in flight on the executor (`scheduler`), a film's tasks (`film_tasks`: prepare,
segments, finalize), one segment's decoding pass through the stages (`segments`), a film's
finalize step (`finalize`) and the order of the folder passes (`folder_passes`). The executors
themselves sit beside this room, in pipeline/executors/."""
