"""plenocal.detect."""
