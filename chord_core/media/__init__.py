"""media floor."""
