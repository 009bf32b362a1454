"""The control server's transport: the HTTP listener and its state (``control``), the routes, and the
proxies' work queue. It never imports the live session: ``bir.hooks.daemon`` hands it a handler."""
