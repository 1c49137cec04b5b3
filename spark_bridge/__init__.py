"""Spark reads streamon's result topics for batch analytics (a later issue fills this in)."""
