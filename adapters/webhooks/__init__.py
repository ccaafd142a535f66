"""Webhook delivery over HTTP: the SSRF guard and the sender (DESIGN section 6).

Import the modules themselves: ``guard`` loads no aiohttp (the service layer
uses it), ``resolver`` and ``sender`` do.
"""
