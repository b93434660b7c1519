"""Programs shipped with the hub that measure it (run as ``python -m hub.tools.NAME``).

They sit beside the app, above every layer: they compose a hub or a mesh as the app does.
"""
