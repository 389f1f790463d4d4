"""analysis floor."""
