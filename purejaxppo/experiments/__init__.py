"""The experiment side, above the core: many runs as one program (parallel, runs), checkpoints,
run folders, sweeps, statistics, diagnosis, reports, live logging and the command line. It imports the
core (purejaxppo.*); the core never imports it."""
