"""The overlay (mesh v3): a bounded-degree mesh with link-state routing and rendezvous interest."""
