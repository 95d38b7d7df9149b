"""Schedule synthesis: memory-bounded list scheduling, and a local search that tries its orders
on the engine. It sits above the engine and the costs it schedules by, never below them."""
