"""Long-term memory (M5-M7): a user's event graph, seed 3's vector memory with strength, and recall of old turns.

- `store`: the per-process search collections (keyword segments and vectors) of one owner's rows.
- `strength`: seed 3's remember / recall / sleep and the level rules.
- `events`: the event graph of seed 2: extraction, validation, storage, retrieval along relations.
- `recall`: what a turn gets before it runs (one rendered block in the one system message) and what is
  indexed after it (the turn, the events).
"""
