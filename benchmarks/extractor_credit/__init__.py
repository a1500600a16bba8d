"""The credit rules scored on recorded episodes (``docs/results/extractor-credit.md``)."""
