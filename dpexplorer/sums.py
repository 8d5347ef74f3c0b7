"""Placeholder: being written (issue 5/6)."""
