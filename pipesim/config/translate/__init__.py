"""Translators between pipesim's run configuration and the frameworks' own files."""
