"""What every part of the simulator uses: argument checks, size limits, units, compiled
kernels, progress bars and the command lines' shared parsing and exit codes."""
