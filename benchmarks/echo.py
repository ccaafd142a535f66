"""The echo baseline: a bare aiohttp JSON endpoint, the ceiling for one on this machine.

    python -m slotward.benchmarks.echo --port P [--host 127.0.0.1] [--workers N]

``GET /healthz`` answers 200; ``POST /echo`` parses the request's JSON body
and answers it back as JSON (200). Nothing else: no middleware, no access log.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from aiohttp import web

from slotward.benchmarks.baseline_serving import add_serving_arguments, health_handler, serve

__all__ = ["echo_app", "main"]


async def _echo(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:  # not JSON, or not UTF-8
        return web.json_response({"error": "bad_request"}, status=400)
    return web.json_response(body)


async def echo_app() -> web.Application:
    """The echo app: ``GET /healthz`` and ``POST /echo``."""
    app = web.Application()
    app.router.add_get("/healthz", health_handler)
    app.router.add_post("/echo", _echo)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The echo baseline server.")
    add_serving_arguments(parser)
    args = parser.parse_args(argv)
    serve(echo_app, name="echo", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
