"""plenocal.precalib."""
