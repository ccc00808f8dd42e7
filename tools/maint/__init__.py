"""Maintenance of generated files checked into the repository."""
