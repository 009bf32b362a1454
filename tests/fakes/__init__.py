"""Fakes of what is remote and not ours: the BaseIn service and the Anthropic Messages API, over real HTTP."""
