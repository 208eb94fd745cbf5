"""Run a server in its own process group and take the whole group down with us. Stdlib only.

    python guard.py -- <server command...>

The engine that starts a server holds this guard's stdin. When that pipe closes (the engine
stopped it, or its worker exited, crashed or was killed: the kernel closes the pipe in every
case), or when the guard gets SIGTERM, the server's whole process group gets SIGTERM, then
SIGKILL after a grace period: a server's helper processes (vLLM's engine core) never outlive
the session. Ctrl+C is ignored here: the app's own process decides and then closes the pipe.
The guard's first line on stdout is the server's pid (= its process group id).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

GRACE_S = 5.0


def stop_group(pgid: int, grace_s: float = GRACE_S, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM the group, wait for it to empty (at most grace_s), then SIGKILL what is left. The
    caller whose child leads the group passes its `poll` as `reap`: a child that has exited stays
    in the group as a zombie until its parent reaps it, and would hold the wait to its end."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        try:
            os.killpg(pgid, 0)  # anyone left in the group?
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        print("guard: no server command", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL)
    print(server.pid, flush=True)

    def watch_stdin() -> None:
        # os.read on the raw descriptor: a daemon thread blocked in a buffered stdin read aborts
        # the interpreter at exit ("could not acquire lock for <stdin>")
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.is_set():
        code = server.poll()
        if code is not None:
            stop_group(server.pid, grace_s=1.0, reap=server.poll)  # the server died: its helpers go too
            return code
        stop.wait(0.1)
    stop_group(server.pid, reap=server.poll)
    server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
