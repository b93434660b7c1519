"""Links cut in the kernel (sdk/tools/link_cuts.py): the test bed's link failures with nothing in
the path of the links that are not cut.  Real sockets on loopback, a real nftables table."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from sdk.tools.link_cuts import TABLE_PREFIX, KernelCuts, parse_ss, unavailable

WHY = unavailable()
needs_nft = pytest.mark.skipif(WHY is not None, reason=f"kernel cuts: {WHY}")

SS_SAMPLE = """\
0      0      127.0.0.1:35774 127.0.0.1:35819 users:(("python",pid=17510,fd=4))
\t bbr wscale:10,10 rto:204 bytes_sent:1000 bytes_acked:1001 bytes_received:300 segs_out:4
0      0      127.0.0.1:35819 127.0.0.1:35774 users:(("python",pid=17511,fd=5))
\t cubic bytes_acked:1 bytes_received:1000
0      0      127.0.0.1:4000 127.0.0.1:4001
\t cubic bytes_acked:5 bytes_received:5
"""


def test_ss_lines_give_each_socket_its_ends_process_and_bytes_both_ways() -> None:
    sockets = parse_ss(SS_SAMPLE)
    assert [(s.local, s.peer, s.pid, s.carried) for s in sockets] == [
        (("127.0.0.1", 35774), ("127.0.0.1", 35819), 17510, 1301),
        (("127.0.0.1", 35819), ("127.0.0.1", 35774), 17511, 1001),
    ]  # the third has no process: not one of ours to cut


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        yield srv


def _pair(srv: socket.socket) -> tuple[socket.socket, socket.socket]:
    dialled = socket.create_connection(srv.getsockname())
    accepted, _ = srv.accept()
    return dialled, accepted


@needs_nft
def test_the_busiest_link_is_cut_both_ways_and_heals_with_nothing_lost(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    quiet_out, quiet_in = _pair(listener)
    busy_out, busy_in = _pair(listener)
    try:
        busy_out.sendall(b"x" * 5000)
        assert len(busy_in.recv(10000)) > 0
        quiet_out.sendall(b"y")
        quiet_in.recv(10)
        me = {os.getpid(): "me"}
        with KernelCuts() as cuts:
            link = cuts.busiest({port: "me"}, me)
            assert link is not None
            assert link.peer == busy_out.getsockname() and link.local == busy_in.getsockname()
            assert (link.into, link.dialled_by) == ("me", "me") and link.carried >= 5000
            cuts.cut(link)
            busy_out.sendall(b"held")
            busy_in.sendall(b"back")
            quiet_out.sendall(b"free")
            quiet_in.settimeout(5.0)
            assert quiet_in.recv(10) == b"free"  # the other link is untouched
            for end in (busy_in, busy_out):
                end.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    end.recv(10)  # nothing either way
            cuts.heal()
            busy_in.settimeout(10.0)
            busy_out.settimeout(10.0)
            assert busy_in.recv(10) == b"held" and busy_out.recv(10) == b"back"  # TCP resent them
            again = cuts.busiest({port: "me"}, me)
            assert again is not None and again.carried < 1000  # counted from the previous look
            table = cuts.table
        listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
        assert table not in listed
    finally:
        for s in (quiet_out, quiet_in, busy_out, busy_in):
            s.close()


@needs_nft
def test_a_table_left_by_a_process_that_died_is_removed_by_the_next(listener: socket.socket) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    for _ in range(500):  # reaped already, so gone at once; a PID reused this fast would be rare
        if not os.path.exists(f"/proc/{gone}"):
            break
        time.sleep(0.01)
    orphan = f"{TABLE_PREFIX}{gone}"
    subprocess.run(["nft", "add", "table", "ip", orphan], check=True)
    try:
        with KernelCuts() as cuts:
            listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
            assert orphan not in listed and cuts.table in listed
    finally:
        subprocess.run(["nft", "delete", "table", "ip", orphan], capture_output=True, check=False)


def test_without_nft_on_the_path_the_reason_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert unavailable() == "no `nft` command (Debian: apt-get install nftables)"
