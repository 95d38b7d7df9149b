"""The names a synthesised schedule is asked for by, which the command line's help lists: kept
apart from :mod:`pipesim.synthesis.synthesis` (and numpy) so that reading them costs nothing."""

from __future__ import annotations

# The schedule name that asks for a synthesised order (--schedule synth).
SYNTH_NAME = "synth"
# Where a synthesis puts the stages: looped over the devices, or two per device in a V.
PLACEMENTS = ("looped", "v")
