"""The hub-to-hub mesh over libp2p: identity, host, DHT discovery, peer sessions, lazy push.

The hub uses :class:`Mesh` (constructed with callbacks) and :class:`MeshConfig`;
everything else is internal.  Importing this package imports libp2p (~1 s,
~85 MiB): keep it out of the SDK and the wire decoder.
"""

from __future__ import annotations

from ..core.mesh.config import MeshConfig
from ..core.mesh.inbound import V1_ORIGIN, ForwardHandler
from ..core.mesh.interest import InterestTable
from ..core.mesh.protocols import MeshVersion
from ..core.mesh.status import CloseReason, PeerCounters
from .discovery import cluster_key
from .identity import load_or_create_identity
from .mesh import Mesh

__all__ = [
    "V1_ORIGIN",
    "CloseReason",
    "ForwardHandler",
    "InterestTable",
    "Mesh",
    "MeshConfig",
    "MeshVersion",
    "PeerCounters",
    "cluster_key",
    "load_or_create_identity",
]
