"""Sub-commands of the `animegamer` console script: each module has add_arguments(parser) and run(args)."""
