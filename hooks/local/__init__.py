"""The local service: record, calculate, match, derive and book on the user's own machine (issue 18)."""
