"""``rlvr sandbox serve``: this machine's code sandbox (Docker or bubblewrap) behind HTTP for trainers elsewhere.

    RLVR_SANDBOX_TOKEN=... rlvr sandbox serve --host 0.0.0.0 --port 8080 --max-concurrency 8
    # on a trainer: RLVR_SANDBOX_URL=http://thishost:8080 RLVR_SANDBOX_TOKEN=... and `backend: remote`

The token comes from ``--token-file``, ``--token`` or ``RLVR_SANDBOX_TOKEN`` (in that order); with none of them a
random one is made and printed. Endpoints, limits and the SandboxFusion ``/run_code`` API: docs/services.md.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from rlvr.commands import serve_until_interrupted


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sandbox serve`` to an argparse subparsers object."""
    parser = subparsers.add_parser("sandbox", help="serve this machine's code sandbox to other machines",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="{serve}")
    serve = actions.add_parser("serve", help="run programs for remote trainers (token required)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--token", help="the token clients must send (prefer RLVR_SANDBOX_TOKEN or --token-file: a "
                                       "command line is visible to every user of the machine)")
    serve.add_argument("--token-file", help="a file whose first line is the token")
    serve.add_argument("--backend", default="auto", choices=["auto", "docker", "bwrap"],
                       help="the sandbox programs run in (never none)")
    serve.add_argument("--max-concurrency", type=int, default=4, help="requests run at once")
    serve.add_argument("--max-connections", type=int, default=64, help="connections served at once")
    serve.add_argument("--queue-s", type=float, default=30.0, help="how long a request waits for a turn (then 503)")
    serve.add_argument("--max-request-mb", type=float, default=16.0, help="largest request body (then 413)")
    serve.add_argument("--max-time-s", type=float, default=600.0, help="largest time limit a test may ask for")
    serve.add_argument("--max-memory-mb", type=int, default=8192, help="largest memory limit a test may ask for")
    serve.set_defaults(func=serve_command)
    return parser


def read_token(args: argparse.Namespace) -> tuple[str, bool]:
    """The server's token and whether it was made here (no ``--token-file``, ``--token`` or ``RLVR_SANDBOX_TOKEN``).
    Raises FileNotFoundError for a missing token file."""
    if args.token_file:
        return Path(args.token_file).read_text().splitlines()[0].strip(), False
    given = args.token or os.environ.get("RLVR_SANDBOX_TOKEN")
    if given:
        return given, False
    return secrets.token_urlsafe(24), True


def serve_command(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns 0, or 2 after one line on stderr when the server cannot start."""
    from rlvr.sandbox import SandboxUnavailable
    from rlvr.sandbox.server import SandboxServer, ServerSettings

    token, made = read_token(args)
    try:
        settings = ServerSettings(token=token, backend=args.backend, max_concurrency=args.max_concurrency,
                                  max_connections=args.max_connections, queue_s=args.queue_s,
                                  max_request_mb=args.max_request_mb, max_time_s=args.max_time_s,
                                  max_memory_mb=args.max_memory_mb)
        server = SandboxServer(args.host, args.port, settings)
    except (ValueError, SandboxUnavailable, OSError) as e:
        print(f"error: rlvr sandbox serve: {e}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    print(f"rlvr sandbox serve: http://{host}:{port} ({server.backend.description()}); "
          f"{settings.max_concurrency} requests at once", flush=True)
    if made:
        print(f"token (none was given): {token}", flush=True)
    return serve_until_interrupted(server)
