"""plenocal.sim."""
