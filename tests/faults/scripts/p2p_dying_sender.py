"""Two one-process MPI jobs on a port: the sender dies while its large message is on its way.

``accept DIR``: opens a port (name in ``DIR/port``), accepts, waits until the start of the
sender's message has arrived (``Iprobe``) and the sender's process is gone, then polls the
channel for 2 s: every `Channel.poll` must return None at once (a blocking receive would wait
for the end of the message for ever), and `Channel.abandon` must drop the half-received one.
``connect DIR``: connects, writes its pid to ``DIR/pid``, posts a 256 MiB message and
SIGKILLs itself before MPI can have sent all of it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from hpcdist.comm.p2p import TAG_PS_VARIABLE, Channel, close_port, open_port

role, folder = sys.argv[1], Path(sys.argv[2])
SIZE = 256 << 20

if role == "connect":
    while not (folder / "port").exists():
        time.sleep(0.01)
    channel = Channel.connect((folder / "port").read_text())
    (folder / "pid").write_text(str(os.getpid()))
    channel.post(b"x" * SIZE, 0, TAG_PS_VARIABLE)
    os.kill(os.getpid(), signal.SIGKILL)

port = open_port()
(folder / "port.tmp").write_text(port)
os.replace(folder / "port.tmp", folder / "port")
channel = Channel.accept(port, Channel(), root=0)
close_port(port)
deadline = time.monotonic() + 30
while not channel.comm.Iprobe(source=0, tag=TAG_PS_VARIABLE):
    if time.monotonic() > deadline:
        sys.exit("FAIL the start of the message never arrived")
    time.sleep(0.001)
print("MATCHED the start of the message arrived", flush=True)
pid = int((folder / "pid").read_text())
while True:  # the sender's process is gone (its pid no longer exists)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.01)
slowest, got, end = 0.0, None, time.monotonic() + 2.0
while time.monotonic() < end and got is None:
    start = time.perf_counter()
    got = channel.poll(0, TAG_PS_VARIABLE)
    slowest = max(slowest, time.perf_counter() - start)
    time.sleep(0.01)
if got is not None:
    print(f"COMPLETE the whole message arrived before the sender died ({len(got[1])} bytes)")
else:
    print(f"POLLED none in 2 s, slowest poll {slowest * 1e3:.3f} ms", flush=True)
channel.abandon()
print("DONE", flush=True)
