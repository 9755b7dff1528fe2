"""Daphne's options, the same wherever the project starts it: `make run` and scripts/serve (through which `make run`
starts it), the process tests (tests/processes.py) and the benches.

Daphne's command line drops a websocket whose opening handshake has not finished within 5 seconds
(`--websocket_connect_timeout`, also the handshake timeout it gives autobahn), where its own `Server` class defaults
to 20. Under a burst of connects (every page of a busy site reconnecting after a restart) a slow or loaded machine
queues handshakes behind each other, and at 5 seconds the later ones got no HTTP answer at all (the browser's page
reconnects, a client program sees an error). 20 seconds lets the queue drain; a client that never finishes its
handshake is still dropped.

Stdlib only, no imports: scripts/serve reads this file by path on any python3 (config/__init__ imports Celery).
"""

HANDSHAKE_SECONDS = 20

DAPHNE_OPTIONS: tuple[str, ...] = ("--websocket_connect_timeout", str(HANDSHAKE_SECONDS))
