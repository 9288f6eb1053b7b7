"""A local Ray for the ``ray`` runtime: it listens on loopback only and dies with its driver.

The driver does not start Ray in its own process. It starts a supervisor
(``python -m omni_core.stage.ray_local``, in a session of its own) which starts the local Ray
and prints its GCS address; the driver then joins that address like any cluster.

* **Loopback**: the supervisor's environment carries ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
  (Ray's single-machine mode, the default on macOS and Windows): the node IP is ``127.0.0.1``,
  and from it every Ray service binds loopback: GCS, raylet (node and object manager), workers,
  dashboard (``dashboard_host`` too), dashboard / runtime-env / metrics agents, metrics export.
* **Lifeline**: the supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every Ray
  process, however deep and whatever its process group, stays its descendant. It watches its
  driver (its parent pid, and the pipe the driver holds: EOF on death, ``stop`` on shutdown);
  when the driver ends, by any signal including SIGKILL, or asks it to stop, it shuts Ray down
  and then SIGKILLs whatever descendant is left, and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import logging
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

from omni_core.errors import StartupError

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# Ray's switch for single-machine clusters: get_node_ip_address() answers 127.0.0.1, and the
# services bind the node IP when it is a loopback address (all interfaces otherwise).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
POLL_S = 0.2  # how often the supervisor checks its driver
SHUTDOWN_GRACE_S = 10.0  # ray.shutdown() in the supervisor, before SIGKILL of the rest
PR_SET_CHILD_SUBREAPER = 36


class LocalRay:
    """Driver side: starts the supervisor, hands out the address, stops it."""

    def __init__(self, num_cpus: int, start_timeout_s: float = 120.0) -> None:
        self.num_cpus = num_cpus
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self._auth: dict[str, str] = {}  # a token of this Ray's own, unless RAY_AUTH_MODE is set
        self._saved_env: dict[str, str | None] = {}
        self._saved_switch: bool | None = None

    @property
    def address(self) -> str:
        return str(self.info["address"])

    def start(self) -> str:
        """Start the supervised Ray; return its GCS address (``127.0.0.1:port``)."""
        if not os.environ.get("RAY_AUTH_MODE"):  # else the caller's choice stands
            self._auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        env = {**os.environ, **LOOPBACK_ENV, **self._auth}
        env.pop("RAY_ADDRESS", None)
        read, write = os.pipe()  # the supervisor's one-line reply
        args = {"driver_pid": os.getpid(), "num_cpus": self.num_cpus, "reply_fd": write}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "omni_core.stage.ray_local", json.dumps(args)],
                stdin=subprocess.PIPE,  # the lifeline: "stop", or EOF when this process ends
                stdout=subprocess.DEVNULL,
                env=env,
                pass_fds=(write,),
                start_new_session=True,  # a terminal's Ctrl-C reaches the driver, not Ray
            )
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as reply:
            line = _read_line(reply, self.start_timeout_s)
        try:
            self.info = json.loads(line) if line else {}
        except ValueError:
            self.info = {"error": f"unreadable reply {line[:200]!r}"}
        if "address" not in self.info:
            why = self.info.get("error") or (
                f"no reply within {self.start_timeout_s:.0f} s"
                if self.process.poll() is None
                else f"supervisor exited with status {self.process.returncode}"
            )
            self.stop(timeout_s=10.0)
            raise StartupError(f"ray runtime: could not start a local Ray: {why}")
        if self.info.get("exposed"):
            logger.warning("ray runtime: Ray listens beyond loopback: %s", self.info["exposed"])
        return self.address

    def join(self) -> None:
        """Connect this process (the driver) to the started Ray, as a single-machine driver.

        Ray rewrites a loopback address to the machine's IP unless its single-machine switch is
        on, and this process imported Ray with it off: set it (Ray reads the constant at each
        use) for as long as the local Ray lives; :meth:`stop` puts it back. Same for the auth
        token, which Ray caches.
        """
        import ray
        import ray._private.ray_constants as ray_constants

        update = {**LOOPBACK_ENV, **self._auth}
        self._saved_env = {key: os.environ.get(key) for key in update}
        os.environ.update(update)
        self._saved_switch = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False
        _reload_ray_auth()
        ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)

    def _restore(self) -> None:
        if self._saved_switch is not None:
            import ray._private.ray_constants as ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = self._saved_switch
            self._saved_switch = None
        if self._saved_env:
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_env = {}
            _reload_ray_auth()

    def pids(self) -> list[int]:
        """The supervisor and every Ray process under it."""
        if self.process is None or self.process.poll() is not None:
            return []
        return [self.process.pid, *descendants(self.process.pid)]

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Ask the supervisor to stop Ray and wait for it; kill what is left on timeout.

        Leave Ray (``ray.shutdown()``) in this process first: a driver whose raylet vanishes
        under it may be ended by Ray's core worker. True when everything stopped in time.
        """
        self._restore()
        process = self.process
        if process is None:
            return True
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.write(b"stop\n")
                process.stdin.flush()
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout_s)
            clean = process.returncode == 0
        except subprocess.TimeoutExpired:
            logger.error("ray runtime: the local Ray did not stop in %.0f s: killing it", timeout_s)
            for pid in [*descendants(process.pid), process.pid]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            process.wait(10.0)
            clean = False
        return clean


def _reload_ray_auth() -> None:
    """Make Ray read ``RAY_AUTH_MODE`` / ``RAY_AUTH_TOKEN`` again (it caches both)."""
    raylet: Any = importlib.import_module("ray._raylet")
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()


def _read_line(stream: IO[bytes], timeout_s: float) -> str:
    """One line from a pipe, or what came before EOF / the deadline."""
    fd, data = stream.fileno(), b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace")


# --- process tree (Linux /proc; elsewhere only the process group is reached) -----------------
def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) of every process."""
    table: dict[int, tuple[int, str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces
            table[int(entry)] = (int(fields[1]), fields[0])
    return table


def descendants(root: int, zombies: bool = False) -> list[int]:
    """Pids below ``root`` (zombies left out unless asked for)."""
    children: dict[int, list[int]] = {}
    table = _processes()
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if zombies or table[pid][1] != "Z":
            found.append(pid)
    return found


def exposed_listeners(pids: list[int]) -> list[str]:
    """``pid:ip:port`` of each listening TCP socket of ``pids`` not on loopback (psutil needed;
    without it: none reported)."""
    import ipaddress

    try:
        import psutil
    except ImportError:
        return []
    out = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        for conn in conns:
            if conn.status != psutil.CONN_LISTEN:
                continue
            ip = ipaddress.ip_address(conn.laddr.ip.split("%")[0])
            mapped = getattr(ip, "ipv4_mapped", None)
            if not (ip.is_loopback or (mapped is not None and mapped.is_loopback)):
                out.append(f"{pid}:{conn.laddr.ip}:{conn.laddr.port}")
    return out


# --- supervisor -------------------------------------------------------------------------------
def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def kill_tree(deadline_s: float) -> bool:
    """SIGKILL every descendant of this process until none is left (reaping the orphans this
    subreaper inherits); True when none is."""
    deadline = time.monotonic() + deadline_s
    while True:
        _reap()
        left = descendants(os.getpid())
        if not left or time.monotonic() > deadline:
            return not left
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _supervise(driver_pid: int, num_cpus: int, reply_fd: int) -> int:
    os.set_inheritable(reply_fd, False)  # Ray's processes must not hold the reply pipe open
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no subreaper
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stop, ready = threading.Event(), threading.Event()
    watch = threading.Thread(target=_watch, args=(driver_pid, stop, ready), daemon=True)
    watch.start()
    info, status = _start_ray(num_cpus)
    ready.set()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # after ray.init, which sets its own
        signal.signal(sig, lambda *_: stop.set())
    try:
        os.write(reply_fd, (json.dumps(info) + "\n").encode())
    except OSError:  # the driver is gone already
        stop.set()
    os.close(reply_fd)
    while status == 0 and not stop.wait(POLL_S):
        pass
    shutdown = threading.Thread(target=_ray_shutdown, daemon=True)
    shutdown.start()
    shutdown.join(SHUTDOWN_GRACE_S)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.getpgrp() == os.getpid():  # own group (own session): whatever is still in it
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGTERM)
    return status if kill_tree(deadline_s=10.0) else 1


def _watch(driver_pid: int, stop: threading.Event, ready: threading.Event) -> None:
    """Set ``stop`` when the driver ends or asks to; if Ray is still starting then, end it all
    here (the main thread is inside ``ray.init``)."""
    fd = sys.stdin.fileno()
    while not stop.is_set() and os.getppid() == driver_pid:
        if select.select([fd], [], [], POLL_S)[0]:
            break  # "stop" from the driver, or EOF: the driver closed its end or died
    stop.set()
    if not ready.is_set():
        kill_tree(deadline_s=10.0)
        os._exit(1)


def _start_ray(num_cpus: int) -> tuple[dict[str, Any], int]:
    try:
        import ray

        ray.init(
            address="local",
            num_cpus=num_cpus,
            _node_ip_address=LOOPBACK,
            include_dashboard=True,  # serves the state API the shutdown check uses
            dashboard_host=LOOPBACK,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
        me = os.getpid()
        address = ray.get_runtime_context().gcs_address
        return {"address": address, "pid": me, "exposed": exposed_listeners(descendants(me))}, 0
    except BaseException as exc:  # SystemExit too: Ray's SIGTERM handler, during ray.init
        return {"error": f"{type(exc).__name__}: {exc}"}, 1


def _ray_shutdown() -> None:
    with contextlib.suppress(Exception):
        import ray

        ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    args = json.loads((argv or sys.argv[1:])[0])
    status = _supervise(int(args["driver_pid"]), int(args["num_cpus"]), int(args["reply_fd"]))
    os._exit(status)  # no atexit: Ray's handlers ran in _ray_shutdown or are moot


if __name__ == "__main__":
    main()
