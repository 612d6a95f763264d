"""ksearch_engine."""
