"""Connections per second from one source address: a token bucket per address, bounded in memory.

A client that connects in a tight loop (the attack benchmark's malformed-connection
attacker makes ~2,000 connections a second) costs the hub an accept, a session, a task,
a decode and a close each time, on the cores every other client needs.  The listener asks
:meth:`ConnectRate.check` before it opens a session: each source address has a bucket of
``burst`` connections that refills at ``per_second``; a connection that finds its bucket
empty is refused with a short ``ERROR LIMIT_EXCEEDED`` and closed at once (no session, no
task, no frame of it read).

* IPv6 addresses share a bucket per /64: one host commonly holds a whole /64, so a bucket
  per address would let it connect without limit.  An IPv4-mapped address is its IPv4 one.
* The table is bounded (``max_addresses``, least recently seen forgotten first), so an
  attacker with many source addresses cannot grow it.  A forgotten address starts again with
  a full bucket: what it forgets of an address that was being limited is counted
  (``forgotten_while_limited``).  Against many addresses a per-address limit cannot hold
  anyway; ``--max-connections`` and the accept loop's cost bound that case.
* Loopback is not exempt by default (a local process is as able to flood as a remote one);
  ``exempt`` takes addresses and CIDRs an operator trusts (a load balancer, a local test bed).
* A connection that ends before it was welcomed (bad frames, no HELLO in time, credentials
  refused, a failed TLS handshake) costs its address ``failed_cost`` more tokens
  (:meth:`ConnectRate.failed`), down to a debt of one burst: a client that connects in a loop
  and fails each time gets ``per_second / (1 + failed_cost)`` sessions a second, the rest
  refused at accept, which costs the hub a fifth of a failed session.  A healthy client pays
  nothing; a broken one is slowed, not locked out (the debt is paid back at ``per_second``).

Refusals are counted per address class (loopback, private, link_local, global, other) for
status and the metrics; the log names a limited address at most once every
:data:`LOG_EVERY_SECONDS`, with the count refused since, never once per refused connection.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from wire import Error, ErrorCode

from .events import ev

log = logging.getLogger("pub0sub.hub.connection")

#: The classes refusals are counted under (status and metrics name every one, zero or not).
ADDRESS_CLASSES = ("loopback", "private", "link_local", "global", "other")
IPV6_BUCKET_PREFIX = 64
#: An address that stays limited is logged again at most this often, with what was refused since.
LOG_EVERY_SECONDS = 10.0
#: After a batch of accepts that refused a connection (its address's rate, or max_connections),
#: the accept loop waits this long before it looks at the backlog again (:meth:`ConnectRate.refusing_pause`).
REFUSING_PAUSE_SECONDS = 0.01

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, kw_only=True)
class ConnectRateLimits:
    #: Connections a second one address (an IPv6 /64) may open, on average; 0: no limit.
    per_second: float = 100.0
    #: Connections it may open at once before the rate applies (a client pool starting up).
    burst: int = 200
    #: Addresses and CIDRs (``10.0.0.0/8``, ``::1``) never limited.
    exempt: tuple[str, ...] = ()
    #: Addresses tracked at once, least recently seen forgotten first.
    max_addresses: int = 16_384
    #: Connections the hub accepts a second from everyone together, after a burst of
    #: ``accept_burst``: past it the accept loop waits, and new connections wait in the kernel's
    #: backlog (then are refused by the kernel when it is full).  0: no budget.
    accepts_per_second: float = 0.0
    accept_burst: int = 1000
    #: Tokens more that a connection ending before it was welcomed costs its address; 0: none.
    failed_cost: float = 10.0

    def __post_init__(self) -> None:
        if self.failed_cost < 0:
            raise ValueError("failed_connect_cost must be >= 0 (0: a failed connection costs what any does)")
        if self.per_second < 0:
            raise ValueError("max_connects_per_second_per_address must be >= 0 (0: no limit)")
        if self.accepts_per_second < 0:
            raise ValueError("max_accepts_per_second must be >= 0 (0: no budget)")
        if self.accept_burst < 1:
            raise ValueError("accept_burst must be at least 1")
        if self.burst < 1:
            raise ValueError("connect_burst_per_address must be at least 1")
        if self.max_addresses < 1:
            raise ValueError("the connect rate table needs room for one address")
        parse_exempt(self.exempt)  # raises ValueError naming a bad entry


def parse_exempt(entries: tuple[str, ...]) -> tuple[Network, ...]:
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"connect_rate_exempt: {entry!r} is not an address or CIDR ({exc})") from None
    return tuple(networks)


def address_class(address: Address | None) -> str:
    if address is None:
        return "other"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link_local"
    if address.is_private:
        return "private"
    return "global" if address.is_global else "other"


def _parse(host: str) -> Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone id is not part of the address
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _classify(host: str, exempt: tuple[Network, ...]) -> tuple[str | None, str]:
    """``host``'s bucket (None: exempt) and its address class (ConnectRate caches it per host:
    parsing an address took a seventh of a refusal's time, and a storm comes from few addresses)."""
    address = _parse(host)
    kind = address_class(address)
    if address is not None and exempt and any(address in net for net in exempt):
        return None, kind
    if address is None:
        return host, kind
    if address.version == 4:
        return str(address), kind
    return str(ipaddress.ip_network(f"{address}/{IPV6_BUCKET_PREFIX}", strict=False)), kind


class LogThrottle:
    """A refusal that repeats is logged the first time, then at most every
    :data:`LOG_EVERY_SECONDS` with how many came since: a line per refusal would cost a flood
    more than refusing it does."""

    __slots__ = ("logged_at", "unlogged")

    def __init__(self) -> None:
        self.logged_at = -math.inf
        self.unlogged = 0

    def count(self, now: float) -> int:
        """One more refusal: how many to report in a line now (this one included), or 0 for none."""
        self.unlogged += 1
        if now - self.logged_at < LOG_EVERY_SECONDS:
            return 0
        count, self.logged_at, self.unlogged = self.unlogged, now, 0
        return count


class _Bucket:
    __slots__ = ("last", "log", "tokens")

    def __init__(self, tokens: float, last: float) -> None:
        self.tokens = tokens
        self.last = last
        #: Refusals of this address.  (An address held at the rate is admitted a few times a
        #: second: logging each time it "starts" being limited again would be a line per token.)
        self.log = LogThrottle()

    def refill(self, now: float, limits: ConnectRateLimits) -> None:
        self.tokens = min(float(limits.burst), self.tokens + (now - self.last) * limits.per_second)
        self.last = now


class ConnectRate:
    """The buckets, the exemptions and what was refused."""

    def __init__(self, limits: ConnectRateLimits) -> None:
        self.limits = limits
        self._exempt = parse_exempt(limits.exempt)
        #: host -> (bucket, address class), for the 4,096 hosts seen last
        self._classify = functools.lru_cache(maxsize=4096)(functools.partial(_classify, exempt=self._exempt))
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self.refused = 0
        self.refused_by_class: Counter[str] = Counter()
        self.forgotten_while_limited = 0
        #: Connections that ended before they were welcomed and cost their address more (:meth:`failed`).
        self.failed_charged = 0
        #: The accept budget (:meth:`accept_wait`): its tokens, and how often and how long the
        #: accept loop waited for them.
        self._accept_tokens = float(limits.accept_burst)
        self._accept_last: float | None = None
        self.accept_waits = 0
        self.accept_wait_seconds = 0.0
        self.refusing_pauses = 0

    @property
    def enabled(self) -> bool:
        return self.limits.per_second > 0

    def check(self, host: str, now: float) -> bytes | None:
        """A connection from ``host`` (the peer's address as the socket gives it): None to
        accept it, or the ERROR frame that refuses it."""
        limits = self.limits
        if limits.per_second <= 0:
            return None
        key, kind = self._classify(host)
        if key is None:
            return None
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(limits.burst), now)
            if len(self._buckets) > limits.max_addresses:
                _, forgotten = self._buckets.popitem(last=False)
                self.forgotten_while_limited += forgotten.tokens < 1
        else:
            self._buckets.move_to_end(key)
            bucket.refill(now, limits)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        self.refused += 1
        self.refused_by_class[kind] += 1
        if unlogged := bucket.log.count(now):
            log.warning("connections from %s limited: more than %g a second (burst %d); %d refused since the last "
                        "such line", key, limits.per_second, limits.burst, unlogged,
                        extra=ev("conn_refused", peer=key, reason="connect_rate", x_address_class=kind,
                                 x_refused=unlogged))  # fmt: skip
        retry = (1 - bucket.tokens) / limits.per_second
        reason = f"connection rate from {key}: over {limits.per_second:g}/s; retry in {retry:.2f} s"
        return Error(code=ErrorCode.LIMIT_EXCEEDED, reason=reason).encode()

    def failed(self, host: str, now: float) -> None:
        """A connection from ``host`` ended before it was welcomed: its address owes ``failed_cost``
        more tokens, at most one burst in debt (a forgotten address owes nothing)."""
        limits = self.limits
        if limits.per_second <= 0 or limits.failed_cost <= 0:
            return
        key = self._classify(host)[0]
        bucket = None if key is None else self._buckets.get(key)
        if bucket is None:
            return
        bucket.refill(now, limits)
        bucket.tokens = max(-float(limits.burst), bucket.tokens - limits.failed_cost)
        self.failed_charged += 1

    def accept_wait(self, now: float) -> float:
        """A connection was accepted: seconds the accept loop waits before the next accept.

        The per-address limit cannot hold against many source addresses, and every refusal still
        costs an accept, a read, a write and a close: thousands a second take a core from the
        clients already connected.  A budget on accepts bounds what new connections can cost,
        whoever makes them; past it they wait in the kernel's backlog, and connections already
        open are not touched.  The price: while a storm lasts, a legitimate new connection waits
        its turn with the storm's (its address is not known before it is accepted).
        """
        limits = self.limits
        rate = limits.accepts_per_second
        if rate <= 0:
            return 0.0
        if self._accept_last is not None:
            refilled = self._accept_tokens + (now - self._accept_last) * rate
            self._accept_tokens = min(float(limits.accept_burst), refilled)
        self._accept_last = now
        self._accept_tokens -= 1
        if self._accept_tokens >= 0:
            return 0.0
        wait = -self._accept_tokens / rate
        self.accept_waits += 1
        self.accept_wait_seconds += wait
        return wait

    def refusing_pause(self, refused: int) -> float:
        """A batch of accepts refused ``refused`` connections (for their address's rate, or at
        max_connections): seconds the accept loop waits before the next batch.

        A wake-up costs the hub several times what refusing a connection does (docs/benchmarks.md,
        "What one connection costs the hub"), so an address that connects one connection at a time
        would cost a wake-up each.  After refusals the loop pauses: meanwhile connections wait in
        the kernel's backlog and are then refused (or accepted) in one batch, and an attacker that
        waits for each answer gets one connection per pause.  Other new connections wait up to
        :data:`REFUSING_PAUSE_SECONDS` with them, only while the hub is refusing."""
        if refused <= 0:
            return 0.0
        self.refusing_pauses += 1
        return REFUSING_PAUSE_SECONDS

    def status(self) -> dict[str, Any]:
        limits = self.limits
        return {
            "per_second_per_address": limits.per_second,
            "burst_per_address": limits.burst,
            "exempt": list(limits.exempt),
            "addresses_tracked": len(self._buckets),
            "max_addresses": limits.max_addresses,
            "refused": self.refused,
            "refused_by_address_class": {kind: self.refused_by_class[kind] for kind in ADDRESS_CLASSES},
            "forgotten_while_limited": self.forgotten_while_limited,
            "failed_cost": limits.failed_cost,
            "failed_charged": self.failed_charged,
            "accepts_per_second": limits.accepts_per_second,
            "accept_burst": limits.accept_burst,
            "accept_waits": self.accept_waits,
            "accept_wait_seconds": round(self.accept_wait_seconds, 3),
            "refusing_pauses": self.refusing_pauses,
        }
