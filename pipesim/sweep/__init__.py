"""Many configurations at once: the sweep grid, its resumable rows file, and the benchmark of
configurations per second."""
