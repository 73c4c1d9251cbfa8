"""The run directory's contract, owned in one place, one floor below capture, load and analyze.

    notebooks/ · runner · cli                entry points
    narrate/  plots/                         sentences and figures
    analyze/                                 pure functions on the run's tables
    capture/  load/                          write the run directory / read it
    contract/                                names (this package): what capture writes and load parses
    base: devices · escape · i18n · env …    no kernelbook import above them

- `names`: the phases, the profiler and NVTX range grammar and the module attributes capture marks and load
  parses;
- `sampling`: which decode steps a long generation's profiler records (the parameters' check and the capture);
- `session`: what the book runner tells the chapters it runs (locks held, its command, the side-by-side pipeline).

A module here imports nothing above the base floor.
"""
