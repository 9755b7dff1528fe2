"""Conversation memory: messages, context windows and token-overflow strategies, event graph and vector memory."""
