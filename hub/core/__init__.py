"""The hub's decisions, without I/O: routing, subscriptions, groups, consumer positions,
the publish path, client sessions and the hub's side of the mesh.

Inputs come in as calls (bytes a connection received, a frame, the time, a stored
batch); what to do comes out as data the I/O shell carries out: output queued on a
session (:class:`~hub.core.clients.ClientSession`) for its transport to send, work
for the pump (:class:`~hub.core.work.WorkQueue`), frames for the mesh.  Nothing here
imports trio, a socket or libp2p; the clock is an object passed in.  Below it lies
``hub.storage``; above it ``hub.shell`` and the composition root ``hub.app``.
"""
