"""Speed and soak benchmarks, one file each: ``python -m benchmarks.speed.<name>``."""
