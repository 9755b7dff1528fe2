"""Signals the memory app sends: other apps listen without memory importing them."""

from django.dispatch import Signal

# A person rated a reply. Sent with sender=Message (the class) and keyword arguments message (the rated
# memory.models.Message), rating (+1 or -1), comment (str, may be empty), source ("chat", "widget" or "api").
feedback_given = Signal()
