"""The HTTP entrypoint: the aiohttp app, its routes, handlers, auth and problem+json."""
