"""Schedule synthesis: memory-bounded list scheduling with the zero-bubble paper's per-stage
warm-up, a local search that tries its orders on the engine, an exact branch and bound for
tiny orders, and the lower bound every schedule is measured against. It sits above the engine
and the costs it schedules by, never below them."""
