"""slotward.testing: helpers users may import to test what they build on slotward."""
