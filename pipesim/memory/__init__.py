"""The memory model: its rules (what each device holds, and how each action changes it) and
their closed form for the partitioner and the planner; the engines apply the same rules over
time (:mod:`pipesim.engine.memory_over_time`)."""
