"""Seed 3's long-lived goal agent (M2): a loop on a goal with recall, remember, sleep, the execution model and a
question to the user with a timeout, run by Celery within the limits an operator sets. See agents/goal/loop.py."""
