"""Models and rules that every other layer shares."""
