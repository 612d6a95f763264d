"""propose."""
