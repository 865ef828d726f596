"""The operators' web console at /console (see views.py)."""
