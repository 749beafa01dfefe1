"""Metrics, events, logging and the health/metrics HTTP server."""
