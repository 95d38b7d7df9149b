"""The memory model: what each device holds, over time (for the engines) and in closed form
(for the partitioner and the planner)."""
