"""A rule at the first visit (``docs/results/landmark-rule.md``)."""
