"""Workflows (A7, seed 1): YAML documents of steps (input, plugin, llm, custom, output), validated on save with
errors that name the step, the field and the line, and run step by step with a log."""
