"""The rules of the coordination core: pure functions of values, no ports."""
