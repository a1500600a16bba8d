"""An independent reader (``docs/results/second-reader.md``)."""
