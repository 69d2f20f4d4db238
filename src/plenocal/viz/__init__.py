"""plenocal.viz."""
