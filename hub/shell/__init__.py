"""The I/O shell: sockets, libp2p streams, timers and threads that move bytes and events.

Nothing here decides anything: it feeds the core (``hub.core``) what arrived and
carries out what the core left to do.
"""
