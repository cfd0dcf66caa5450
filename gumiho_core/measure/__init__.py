"""How fast on THIS device: what a decoding step costs here (costs), the auto tree that weighs those costs
against what each tree would accept (autotree: `--tree auto`, the app's preset "auto"), and the benchmark
of every decoding method (bench: `python -m gumiho_core.bench`)."""
