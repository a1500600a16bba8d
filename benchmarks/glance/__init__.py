"""The results index's at-a-glance table across studies (``docs/results/index.md``)."""
