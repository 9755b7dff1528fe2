"""Plans (P1-P7): the planner agent kind, the plan executor with interrupt and resume, and the finalizer."""
