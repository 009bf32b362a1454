"""The live session's brain: the controller of runs per turn, the steer driver, the turn's state, the
gates, booking, the outbox and the recorder. It never imports ``bir.hooks.commands``."""
