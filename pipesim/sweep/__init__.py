"""Many configurations at once: the sweep grid, its points checked before any work, and one
point simulated (the processes that run them and the rows file are the application's)."""
