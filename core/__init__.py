"""The bottom layer: configuration, logging, scenario types, the plan and its guards, derivation, pricing,
reports, and the service client. It imports nothing else of bir; its few I/O modules (the service client,
the installed-projects store, logging) are apart from its pure ones."""
