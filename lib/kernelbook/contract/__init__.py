"""The run directory's contract, owned in one place, one floor below capture, load and analyze.

    notebooks/ · runner · cli                entry points
    narrate/  plots/                         sentences and figures
    analyze/                                 pure functions on the run's tables
    capture/  load/                          write the run directory / read it
    contract/                                names, layout, shapes … (this package): what capture writes, load reads
    base: devices · escape · i18n · env …    no kernelbook import above them

- `config`: the validated parameters as frozen, typed configurations (`CaptureConfig`, `BookConfig`), built once at
  an entry point; `as_dict()` where they travel as a dict (a worker's params.json, the manifest's `params`);
- `names`: the phases, the profiler and NVTX range grammar and the module attributes capture marks and load
  parses;
- `kernels`: a kernel's identity from its name (library, category, friendly name), which capture writes and load
  recomputes;
- `layout`: where each artifact of a run directory lies (manifest, tables, raw traces, each rank's ncu folder, the
  capture's staging folders): the one module that names them;
- `manifest`: the run's manifest.json as frozen, typed values, and its one reader (`read_manifest`), which
  migrates a run written by an older version;
- `sampling`: which decode steps a long generation's profiler records (the parameters' check and the capture);
- `session`: what the book runner tells the chapters it runs (locks held, its command, the side-by-side pipeline);
- `shapes`: what an aten op's recorded shapes and a launch's dimensions say: matrix dims, 2·M·N·K, implied bytes,
  attention and elementwise work (the FLOP and byte checks, the roofline's useful work and the what-if).

A module here imports nothing above the base floor.
"""
