"""Webhook delivery over HTTP: the SSRF guard and the sender (DESIGN section 6)."""

from slotward.adapters.webhooks.guard import GuardedResolver, RefusedAddress, Resolve, UrlGuard
from slotward.adapters.webhooks.sender import Outcome, WebhookSender

__all__ = ["GuardedResolver", "Outcome", "RefusedAddress", "Resolve", "UrlGuard", "WebhookSender"]
