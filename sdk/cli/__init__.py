"""The ``pub0sub`` command and the subcommands that are thin fronts on the client library:
``pub``, ``sub``, ``status`` and ``cluster`` (:mod:`.commands` dispatches to every subcommand,
importing each only when called).  ``python -m sdk.cli`` is the console script.
"""
