"""Training Gumiho heads for a target: data (self-distillation), the objective, the loop, the CLI.

Nothing in inference imports this package; it imports the engine (target, drafter, decoding) to
make data and to evaluate what it trains.
"""
