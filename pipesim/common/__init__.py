"""What every part of the simulator uses: argument checks, size limits, units, compiled
kernels, progress bars, and the interface through which work is mapped over workers."""
