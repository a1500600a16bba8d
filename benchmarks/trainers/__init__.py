"""The trainers: update throughput against TRL, a learning run, and the paper's methods on the
corridor (``docs/results/trainers-corridor.md``).
"""
