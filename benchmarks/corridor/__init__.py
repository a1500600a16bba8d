"""GRPO on the corridor (``docs/results/corridor.md``)."""
