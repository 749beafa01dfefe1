"""Typed views of the objects the dispatcher reads and writes."""
