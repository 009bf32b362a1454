"""The control plane: its vocabulary (``api``, ``hook_routes``), its one client (``control_client``),
discovery, ``bir-hook`` (``hook_client``) and ``bir-hooks`` (``daemon``), in rooms by role: ``server``
(the transport), ``session`` (the live session), ``replay`` (``bir replay``), ``commands`` (the operator
commands) and ``local`` (the local service)."""
