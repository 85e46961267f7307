"""Loops written the way a user writes them from the README alone (not the reference loops in examples/)."""
