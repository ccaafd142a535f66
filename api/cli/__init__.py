"""The slotward command."""
