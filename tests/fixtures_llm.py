"""Fixtures for the model gateway (the scripted OpenAI-compatible server). Filled in by the model-gateway work."""
