"""Reproductions of the papers' experiments (CSV and PNG), added with the adaptive stages."""
