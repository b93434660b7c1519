"""The mesh's decisions, without libp2p: interest, forward windows, dedup, replay, peer records.

The libp2p host, its streams and timers are the shell's (``hub.mesh``); the byte
encoders and the state that decides what each peer gets live here.
"""
