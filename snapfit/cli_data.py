"""CLI commands of the data layer: convert, make-data, info."""

commands = []
