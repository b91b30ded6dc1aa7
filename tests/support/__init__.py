"""Test helpers that are plain Python (no pytest), so benchmarks can use them too."""
