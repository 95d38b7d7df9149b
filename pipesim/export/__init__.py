"""Timeline exports that work for simulated and measured runs alike: Chrome trace, CSV."""

from pipesim.export.chrome_trace import chrome_trace
from pipesim.export.timeline_csv import timeline_csv

__all__ = ["chrome_trace", "timeline_csv"]
