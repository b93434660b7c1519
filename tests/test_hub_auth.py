"""Client authentication and topic ACLs against real hubs (docs/security.md).

The permission cases NATS tests (``server/auth_test.go``, ``test/permissions_test.go``) and
Kafka's deny-takes-precedence, ported: a subscription to ``foo.*`` with ``foo.baz`` denied never
gets ``foo.baz``; a deny wins over an overlapping allow, for groups too; a client that does not
authenticate in time is closed; a bad token and a bad password are refused alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import sdk
import wire
from hub.core.auth_file import AuthFileError, parse_auth_file
from tests.support.inprocess import StartHub, collect, publish, quiet, start_server
from tests.support.rawclient import RawClient
from tests.support.scrape import scrape, value
from tests.support.security import user_entry, write_users

__all__ = ["start_server"]  # the fixture, imported for pytest

ADMIN = user_entry("admin", "root-pw", publish=[">"], subscribe=[">"], durables=["*"], groups=["*"])
NATS_USER = user_entry(
    "bob", "bob-pw",
    publish={"allow": [">"], "deny": ["foo.secret"]},
    subscribe={"allow": ["foo.>"], "deny": ["foo.baz"]},
    groups=["workers"], durables=["bob-*"],
)  # fmt: skip


@pytest.fixture
def users(tmp_path: Path) -> Path:
    return write_users(tmp_path / "users.toml", ADMIN, NATS_USER)


async def login(server_address: str, user: str, secret: str) -> RawClient:
    return await RawClient.connect(server_address, token=f"{user}:{secret}".encode())


async def refused(address: str, token: bytes) -> wire.Error:
    client = await RawClient.connect(address, hello=False)
    await client.send(wire.Hello(token=token))
    error = await client.expect(wire.Error)
    assert await client.recv() is None  # and the connection is closed
    return error


# -- authentication ------------------------------------------------------------------------


async def test_bad_password_unknown_user_and_missing_token_are_refused(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    for token in (b"bob:wrong", b"mallory:bob-pw"):
        error = await refused(server.address, token)
        assert (error.code, error.reason) == (wire.ErrorCode.NOT_AUTHORIZED, "bad credentials")  # alike: no oracle
    assert "requires credentials" in (await refused(server.address, b"")).reason
    assert "USER:SECRET" in (await refused(server.address, b"just-a-token")).reason
    per_user = server.status()["auth"]["per_user"]
    assert per_user["bob"]["auth_failures"] == 1
    assert per_user["(unknown user)"]["auth_failures"] == 2  # mallory, and the token that names nobody
    assert per_user["(anonymous)"]["auth_failures"] == 1
    assert server.status()["counters"]["auth_failures"] == 4


async def test_metrics_show_refusals_per_user(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users, metrics_listen="127.0.0.1:0")
    for token in (b"bob:wrong", b"bob:wrong-again", b"mallory:bob-pw"):
        await refused(server.address, token)
    bob = await login(server.address, "bob", "bob-pw")
    await bob.send(publish("foo.secret", [b"x"], seq=1, ack=True))
    await bob.expect(wire.Error)  # denied: no grant to publish there
    await bob.aclose()
    assert server.ops is not None
    samples = await trio.to_thread.run_sync(scrape, server.ops.address)
    assert value(samples, "pub0sub_user_auth_failures_total", user="bob") == 2
    assert value(samples, "pub0sub_user_auth_failures_total", user="(unknown user)") == 1
    assert value(samples, "pub0sub_user_authenticated_total", user="bob") == 1
    assert value(samples, "pub0sub_user_publish_refused_total", user="bob") == 1


async def test_the_sdk_authenticates_and_a_wrong_password_is_not_retried(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    async with sdk.connect(server.address, user="bob", password="bob-pw") as client:
        assert client.connected
    with pytest.raises(sdk.HubError) as caught:
        async with sdk.connect(server.address, user="bob", password="nope", reconnect=sdk.Reconnect()):
            pass
    assert caught.value.code is wire.ErrorCode.NOT_AUTHORIZED
    assert server.status()["auth"]["per_user"]["bob"]["auth_failures"] == 1  # one try: NOT_AUTHORIZED is fatal


async def test_a_client_that_does_not_authenticate_in_time_is_closed(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users, hello_timeout=0.5)
    silent = await RawClient.connect(server.address, hello=False)
    dripping = await RawClient.connect(server.address, hello=False)
    hello = wire.Hello(token=b"bob:bob-pw-and-some-more-bytes").encode()
    assert len(hello) * 0.05 > 1.0
    for byte in hello:  # a slow drip (one byte per 50 ms) does not finish HELLO in time
        try:
            await dripping.send(bytes([byte]))
        except trio.BrokenResourceError:
            break  # closed on us: what the test wants, the ERROR is read below
        await trio.sleep(0.05)
    for client in (silent, dripping):
        error = await client.expect(wire.Error)
        assert error.code is wire.ErrorCode.NOT_AUTHORIZED and "within 0.5s" in error.reason
        assert await client.recv() is None
    assert server.status()["counters"]["hello_timeouts"] == 2


async def test_before_welcome_only_a_small_hello_is_read(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    client = await RawClient.connect(server.address, hello=False)
    await client.send(wire.Hello(token=b"x" * 5000))
    error = await client.expect(wire.Error)
    assert error.code is wire.ErrorCode.FRAME_TOO_LARGE and "4096" in error.reason


async def test_frames_pipelined_behind_hello_wait_for_the_check(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    client = await RawClient.connect(server.address, hello=False)
    await client.send(wire.Hello(token=b"bob:bob-pw"), wire.Sub(sub_id=1, patterns=("foo.bar",)),
                      publish("foo.bar", [b"early"], seq=1, ack=True))  # fmt: skip
    await client.expect(wire.Welcome)
    await client.expect(wire.SubOk)
    assert await collect(client, 1) == [("foo.bar", 0, b"early")]


async def test_an_open_hub_still_takes_any_hello(start_server: StartHub) -> None:
    server = await start_server()
    for token in (b"", b"whatever:it-is"):  # an old client, and one with credentials the hub does not check
        client = await RawClient.connect(server.address, token=token)
        assert client.welcome.version == wire.CLIENT_PROTOCOL_VERSION
    assert server.status()["auth"]["required"] is False


# -- ACLs: NATS's and Kafka's cases -------------------------------------------------------------


async def test_a_wildcard_subscription_never_gets_the_denied_topic(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    bob, admin = await login(server.address, "bob", "bob-pw"), await login(server.address, "admin", "root-pw")
    await bob.send(wire.Sub(sub_id=1, patterns=("foo.*",)), wire.Sub(sub_id=2, patterns=("foo.baz",)))
    await bob.expect(wire.SubOk)  # foo.* accepted, narrowed
    end = await bob.expect(wire.SubEnd)  # foo.baz itself: refused
    assert (end.sub_id, end.code) == (2, wire.ErrorCode.NOT_AUTHORIZED) and "denied" in end.reason
    await admin.send(publish("foo.baz", [b"secret"], seq=1), publish("foo.bar", [b"fine"], seq=2),
                     publish(("foo.baz", "foo.qux"), [b"both"], seq=3, ack=True))  # fmt: skip
    await admin.expect(wire.PublishAck)
    # foo.baz never; the message sent to foo.baz and foo.qux reaches bob through foo.qux only.
    assert await collect(bob, 2) == [("foo.bar", 0, b"fine"), ("foo.qux", 0, b"both")]
    await quiet(bob)
    # A replay from the log is narrowed the same way.
    await bob.send(wire.Sub(sub_id=3, patterns=("foo.*",), start=wire.StartPosition.EARLIEST))
    await bob.expect(wire.SubOk)
    assert sorted(await collect(bob, 2)) == [("foo.bar", 0, b"fine"), ("foo.qux", 0, b"both")]
    await quiet(bob)


async def test_deny_wins_over_an_overlapping_allow_when_publishing(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    bob = await login(server.address, "bob", "bob-pw")
    await bob.send(publish(("foo.ok", "foo.secret"), [b"x"], seq=7, ack=True))
    error = await bob.expect(wire.Error)
    assert (error.code, error.ref) == (wire.ErrorCode.NOT_AUTHORIZED, 7)
    assert "'foo.secret'" in error.reason
    assert await bob.recv() is None
    doc = server.status()
    assert doc["topics"] == 0  # the whole frame refused: not even foo.ok was stored
    assert doc["auth"]["per_user"]["bob"]["publish_refused"] == 1


async def test_deny_wins_for_groups_too(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    bob = await login(server.address, "bob", "bob-pw")
    await bob.send(
        wire.Sub(sub_id=1, patterns=("foo.*",), group="workers"),  # overlaps the denied foo.baz: never narrowed
        wire.Sub(sub_id=2, patterns=("foo.bar",), group="strangers"),  # a group not granted
        wire.Sub(sub_id=3, patterns=("foo.bar",), group="workers"),
        wire.Sub(sub_id=4, patterns=("foo.baz",), durable="bob-1"),
        wire.Sub(sub_id=5, patterns=("foo.bar",), durable="alice-1"),
        wire.Sub(sub_id=6, patterns=("foo.bar",), durable="bob-1"),
    )
    frames = [await bob.recv() for _ in range(6)]
    ended = {f.sub_id: f.reason for f in frames if isinstance(f, wire.SubEnd)}
    assert {f.sub_id for f in frames if isinstance(f, wire.SubOk)} == {3, 6}
    assert set(ended) == {1, 2, 4, 5}
    assert all(f.code is wire.ErrorCode.NOT_AUTHORIZED for f in frames if isinstance(f, wire.SubEnd))
    assert "never narrowed" in ended[1] and "group 'strangers'" in ended[2] and "durable name 'alice-1'" in ended[5]
    assert server.status()["auth"]["per_user"]["bob"]["subscribe_refused"] == 4


async def test_kafka_deny_takes_precedence_whatever_the_allow(start_server: StartHub, tmp_path: Path) -> None:
    # Kafka's AclAuthorizer: a DENY for a resource wins over an ALLOW for the same or a wider one.
    carol = user_entry("carol", "pw", publish={"allow": [">", "audit"], "deny": ["audit"]},
                       subscribe={"allow": [">", "audit"], "deny": ["audit"]},
                       groups={"allow": ["*", "auditors"], "deny": ["auditors"]})  # fmt: skip
    server = await start_server(auth_file=write_users(tmp_path / "users.toml", carol))
    client = await login(server.address, "carol", "pw")
    await client.send(wire.Sub(sub_id=1, patterns=("audit",)), wire.Sub(sub_id=2, patterns=("x",), group="auditors"))
    assert {(await client.expect(wire.SubEnd)).code for _ in range(2)} == {wire.ErrorCode.NOT_AUTHORIZED}
    await client.send(publish("audit", [b"x"], seq=1))
    assert (await client.expect(wire.Error)).code is wire.ErrorCode.NOT_AUTHORIZED


async def test_anonymous_clients_get_only_what_anonymous_is_granted(start_server: StartHub, tmp_path: Path) -> None:
    users = write_users(tmp_path / "users.toml", ADMIN, '[anonymous]\nsubscribe = ["public.>"]\n')
    server = await start_server(auth_file=users)
    anon = await RawClient.connect(server.address)
    await anon.send(wire.Sub(sub_id=1, patterns=("public.>",)), wire.Sub(sub_id=2, patterns=("private",)))
    await anon.expect(wire.SubOk)
    assert (await anon.expect(wire.SubEnd)).code is wire.ErrorCode.NOT_AUTHORIZED
    await anon.send(publish("public.news", [b"x"], seq=1))
    assert (await anon.expect(wire.Error)).code is wire.ErrorCode.NOT_AUTHORIZED
    assert server.status()["connection_list"][0]["user"] in ("(anonymous)", None)


async def test_status_is_read_only_by_users_granted_it(start_server: StartHub, tmp_path: Path) -> None:
    """STATUS names every connection, user and topic of the hub: with a users file only a user
    with ``status = true`` reads it; anyone else gets ERROR NOT_AUTHORIZED, counted against it.
    A reload that grants it lets the user read it from its next connection's STATUS on."""
    ops = user_entry("ops", "ops-pw", status=True)
    users = write_users(tmp_path / "users.toml", ops, NATS_USER, '[anonymous]\nsubscribe = ["public.>"]\n')
    server = await start_server(auth_file=users, metrics_listen="127.0.0.1:0")
    reader = await login(server.address, "ops", "ops-pw")
    await reader.send(wire.Status())
    doc = json.loads((await reader.expect(wire.StatusReply)).document)
    assert doc["auth"]["required"] is True
    for client, label in ((await login(server.address, "bob", "bob-pw"), "bob"),
                          (await RawClient.connect(server.address), "(anonymous)")):  # fmt: skip
        await client.send(wire.Status())
        error = await client.expect(wire.Error)
        assert error.code is wire.ErrorCode.NOT_AUTHORIZED and f"STATUS is not granted to {label!r}" in error.reason
        assert await client.recv() is None  # ERROR is fatal
        assert server.status()["auth"]["per_user"][label]["status_refused"] == 1
    assert server.ops is not None
    samples = await trio.to_thread.run_sync(scrape, server.ops.address)
    assert value(samples, "pub0sub_user_status_refused_total", user="bob") == 1
    # The ops user is still served; bob is granted status by a reload.
    await trio.Path(users).write_text(ops + user_entry("bob", "bob-pw", status=True))
    assert server.reload_auth()
    bob = await login(server.address, "bob", "bob-pw")
    await bob.send(wire.Status())
    await bob.expect(wire.StatusReply)
    with pytest.raises(AuthFileError, match="status must be true, false"):
        parse_auth_file('[users.x]\nsecrets = ["$argon2id$x"]\nstatus = "yes"\n')


# -- reloading -------------------------------------------------------------------------------


async def test_status_topics_shows_only_the_offsets_of_topics_the_user_may_read(
    start_server: StartHub, tmp_path: Path
) -> None:
    """``status = "topics"``: the user reads STATUS narrowed to its subscribe grant (the topics
    it may read, their offsets, which of them are compacted): what the Spark source plans from,
    and nothing of other users, clients, topics or the hub's own compaction patterns."""
    users = write_users(
        tmp_path / "users.toml",
        user_entry("etl", "etl-pw", publish=[">"]),
        user_entry("spark", "spark-pw", subscribe={"allow": ["sales.>"], "deny": ["sales.secret"]}, status="topics"),
    )
    server = await start_server(auth_file=users, compact=("*.kv", "sales.kv"))
    etl = sdk.connect(server.address, user="etl", password="etl-pw")
    async with etl as client:
        for topic in ("sales.eu", "sales.secret", "sales.kv", "hr.pay", "hr.kv"):
            await client.publish_acked(topic, b"x", key=b"k")
    reader = await login(server.address, "spark", "spark-pw")
    await reader.send(wire.Status())
    doc = json.loads((await reader.expect(wire.StatusReply)).document)
    assert sorted(e["topic"] for e in doc["topic_list"]) == ["sales.eu", "sales.kv"]
    assert all(e["next_offset"] == 1 for e in doc["topic_list"])
    assert doc["storage"] == {"compaction": {"patterns": ["sales.kv"]}}
    assert doc["narrowed_to"] == "topics" and doc["topics"] == 2
    assert not {"connection_list", "auth", "counters", "mesh"} & set(doc), "the narrowed document says more"
    await reader.send(wire.Status())  # and the connection stays open
    await reader.expect(wire.StatusReply)
    with pytest.raises(AuthFileError, match='status must be true, false or "topics"'):
        parse_auth_file('[users.x]\nsecrets = ["$argon2id$x"]\nstatus = "all"\n')
    with pytest.raises(AuthFileError, match='status must be true, false or "topics"'):
        parse_auth_file('[users.x]\nsecrets = ["$argon2id$x"]\nstatus = 1\n')


async def test_a_reload_revokes_narrows_and_keeps_who_is_still_allowed(start_server: StartHub, tmp_path: Path) -> None:
    dave = user_entry("dave", "pw", subscribe=["news.>"])
    erin = user_entry("erin", "pw", subscribe=["news.>"])
    users = write_users(tmp_path / "users.toml", ADMIN, dave, erin)
    server = await start_server(auth_file=users)
    admin = await login(server.address, "admin", "root-pw")
    d, e = await login(server.address, "dave", "pw"), await login(server.address, "erin", "pw")
    await d.send(wire.Sub(sub_id=1, patterns=("news.sport",)), wire.Sub(sub_id=2, patterns=("news.*",)))
    await e.send(wire.Sub(sub_id=1, patterns=("news.*",)))
    await d.expect(wire.SubOk), await d.expect(wire.SubOk), await e.expect(wire.SubOk)
    # dave loses news.sport (his exact subscription ends; his wildcard one is narrowed); erin is removed.
    narrowed = user_entry("dave", "pw", subscribe={"allow": ["news.>"], "deny": ["news.sport"]})
    await trio.Path(users).write_text(ADMIN + narrowed)
    admin_before = server.status()["auth"]["per_user"]["admin"]["connections"]
    assert server.reload_auth()
    end = await d.expect(wire.SubEnd)
    assert (end.sub_id, end.code) == (1, wire.ErrorCode.NOT_AUTHORIZED) and end.reason.startswith("grant revoked")
    error = await e.expect(wire.Error)
    assert error.code is wire.ErrorCode.NOT_AUTHORIZED and "revoked" in error.reason
    await admin.send(publish("news.sport", [b"goal"], seq=1), publish("news.tech", [b"chip"], seq=2, ack=True))
    await admin.expect(wire.PublishAck)  # admin was not dropped
    assert await collect(d, 1) == [("news.tech", 0, b"chip")]
    await quiet(d)
    doc = server.status()["auth"]
    assert doc["reloads"] == 1 and doc["per_user"]["admin"]["connections"] == admin_before
    assert doc["per_user"]["dave"]["revoked"] == 1 and doc["per_user"]["erin"]["revoked"] == 1


async def test_a_users_file_that_cannot_be_used_is_not_reloaded(start_server: StartHub, users: Path) -> None:
    server = await start_server(auth_file=users)
    bob = await login(server.address, "bob", "bob-pw")
    await trio.Path(users).write_text("[users.bob]\nsecrets = ['plaintext']\n")
    assert not server.reload_auth()
    doc = server.status()["auth"]
    assert doc["reload_errors"] == 1 and "argon2id" in doc["last_reload_error"]
    await bob.send(wire.Sub(sub_id=1, patterns=("foo.bar",)))
    await bob.expect(wire.SubOk)  # the previous file stays in force
