"""Floor 0: tenant-free helpers every app may import (the database hop from async code, Markdown rendering, a small
LRU cache, settings with their defaults). core imports no app of the project."""
