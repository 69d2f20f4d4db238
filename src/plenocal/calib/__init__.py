"""plenocal.calib."""
