"""Retrieve -> confidence gate -> generate -> cite, as separate steps."""
