"""The CLI's sub-commands, one module each; :func:`serve_until_interrupted` is the loop of the ones that serve."""

from __future__ import annotations

from typing import Any


def serve_until_interrupted(server: Any) -> int:
    """Serve ``server`` (a ``socketserver`` server) until Ctrl-C, then close its socket; the command's exit code 0."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
