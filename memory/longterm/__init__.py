"""Long-term memory (M5-M7): a user's event graph, seed 3's vector memory with strength, and recall of old turns.

- `store`: the per-process search collections (keyword segments and vectors) of one owner's rows.
- `strength`: seed 3's remember / recall / sleep and the level rules.
- `events`: the event graph of seed 2 (a package): extraction, validation, storage, retrieval along relations.
- `recall`: what a turn gets before it runs (one rendered block in the one system message) and the turn's index.
- `extraction`: the work after a turn (index, extract, store, count) that memory.tasks runs; memory.services
  queues it. Nothing here imports memory.services or memory.tasks (an import-linter contract).
"""
