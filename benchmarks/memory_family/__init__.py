"""Base rates of the memory family (``docs/environments/memory.md``)."""
