"""A classic pcap file of TCP conversations, written from recorded bytes.

Each conversation gets a three-way handshake, then one segment per recorded chunk (split
at 60 KiB), with sequence and acknowledgement numbers that add up, so Wireshark's TCP
reassembly treats it like a capture of the real thing.  Checksums are left 0 (Wireshark
does not check them by default).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

SEGMENT = 60 << 10
SYN, ACK, PSH = 0x02, 0x10, 0x08


@dataclass
class Conversation:
    client: tuple[str, int]
    server: tuple[str, int]
    #: (from_client, bytes) in the order they crossed
    chunks: list[tuple[bool, bytes]] = field(default_factory=list)


def _ip(addr: str) -> bytes:
    return bytes(int(part) for part in addr.split("."))


def _packet(src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int, payload: bytes) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", src[1], dst[1], seq, ack, 5 << 4, flags, 65535, 0, 0)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0, _ip(src[0]), _ip(dst[0]))
    ether = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return ether + ip + tcp + payload


def write_pcap(path: Path, conversations: list[Conversation]) -> None:
    packets: list[bytes] = []
    for conv in conversations:
        c, s = conv.client, conv.server
        cseq, sseq = 1000, 5000
        packets.append(_packet(c, s, cseq, 0, SYN, b""))
        packets.append(_packet(s, c, sseq, cseq + 1, SYN | ACK, b""))
        cseq, sseq = cseq + 1, sseq + 1
        packets.append(_packet(c, s, cseq, sseq, ACK, b""))
        for from_client, data in conv.chunks:
            for at in range(0, len(data), SEGMENT):
                piece = data[at : at + SEGMENT]
                if from_client:
                    packets.append(_packet(c, s, cseq, sseq, ACK | PSH, piece))
                    cseq += len(piece)
                else:
                    packets.append(_packet(s, c, sseq, cseq, ACK | PSH, piece))
                    sseq += len(piece)
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))  # Ethernet
        for i, packet in enumerate(packets):
            out.write(struct.pack("<IIII", 1_700_000_000 + i // 1000, (i % 1000) * 1000, len(packet), len(packet)))
            out.write(packet)
