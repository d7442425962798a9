"""``rlvr judge serve``: a model behind an OpenAI-compatible chat API on this machine, through rlvr's own engine, for
the ``judge`` verifier where no vLLM server runs (a CPU run, tests).

    rlvr judge serve --model embedded:smollm2-135m-instruct --port 8001
    # recipe: verifiers: [{name: judge, kwargs: {url: "http://127.0.0.1:8001/v1",
    #                                           model: "embedded:smollm2-135m-instruct"}}]

On a GPU machine vLLM's own server (``vllm serve MODEL``) serves the same API faster; the verifier takes either.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rlvr.commands import serve_until_interrupted


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``judge serve`` to an argparse subparsers object."""
    parser = subparsers.add_parser("judge", help="serve a judge model over an OpenAI-compatible chat API",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="{serve}")
    serve = actions.add_parser("serve", help="serve --model at http://HOST:PORT/v1")
    serve.add_argument("--model", default="embedded:smollm2-135m-instruct",
                       help="hub name, local folder, or embedded:smollm2-135m-instruct (the default)")
    serve.add_argument("--served-name", help="the model name clients send (default: --model)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8001)
    serve.add_argument("--max-batch", type=int, default=16, help="requests answered in one generate call")
    serve.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    serve.add_argument("--api-key-env", help="environment variable holding a key clients must send (default: none)")
    serve.set_defaults(func=serve_command)
    return parser


def serve_command(args: argparse.Namespace) -> int:
    """Load the model, print the URL, serve until interrupted."""
    from rlvr.serving.chat_model import ChatModel
    from rlvr.serving.chat_server import ChatServer

    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        print(f"error: rlvr judge serve: --api-key-env {args.api_key_env} is not set", file=sys.stderr)
        return 2
    model = ChatModel(args.model, max_batch=args.max_batch, precision=args.precision)
    try:
        server = ChatServer(args.host, args.port, model, args.served_name or args.model, api_key)
    except OSError as e:
        print(f"error: rlvr judge serve: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    print(f"rlvr judge serve: serving {args.served_name or args.model} at http://{host}:{port}/v1 "
          f"({model.precision.reason})", flush=True)
    return serve_until_interrupted(server)
