"""Build artifacts handed from builder workers to run workers (issue 43): the store and the hand-over."""
