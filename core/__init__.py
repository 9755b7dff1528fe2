"""Floor 0: tenant-free helpers every app may import (the database hop from async code, Markdown rendering, a small
LRU cache, settings with their defaults, the registries apps plug into each other with). core imports no app of the
project."""
