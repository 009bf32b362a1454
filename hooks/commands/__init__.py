"""The operator commands behind ``bir``: install, doctor, status, the switches, logs, scenario and the
rendering they share. Nothing else in ``bir.hooks`` imports this room; ``bir.cli`` dispatches to it."""
