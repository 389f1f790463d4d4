"""runtime floor."""
