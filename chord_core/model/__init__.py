"""model floor."""
