"""plenocal.evaluate."""
