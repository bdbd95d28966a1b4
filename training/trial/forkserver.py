"""The node's fork server: TensorFlow imported once, every task of the sandbox runtime forked
from it into a sandbox that bubblewrap built.

    python -P -m training.trial.forkserver --channel-fd N   # a node's own (supervisor/forks.py)
    python -P -m training.trial.forkserver --socket PATH    # the machine's, for all its nodes
                                                            # (with --channel-fd: till it closes)

Importing TensorFlow is nearly all of a small task's CPU (about 5 s of a 6 s trial here); a
fork shares the imported pages instead. Each request is one message (the holder's pid) with
five descriptors: a pidfd of the sandbox's pid 1 (trial/holder.py, which bubblewrap started),
that holder's channel, the task's events and log files, and a memfd holding the order a cold
host would get, which only the task reads. For each, a child of this process:

1. joins the sandbox's namespaces (trial/entry.py), then forks the task into its pid namespace;
2. the task sets its session, drops every capability, sets no_new_privs, loads the same seccomp
   filter bubblewrap loads, closes every descriptor but its own two, reseeds what the fork
   copied (NumPy's global generator; Python's `random` reseeds itself), tells the holder its
   pid, and becomes the task as a cold host would (host.task_become: environment, working
   directory, Landlock, the worker);
3. the child waits for the task outside the sandbox and sends its exit code to the holder,
   which exits with it.

Only the import is done ahead, as in a warm host: nothing here may list or touch a device,
since CUDA does not survive a fork once initialized (TF initializes it when a task first asks
for its devices, from the task's own CUDA_VISIBLE_DEVICES).

A machine's server (`--socket`) serves every node of the machine that connects, each over a
connection of its own, as a node's own serves it over its channel. Only a peer of the server's
own user and user namespace is served: a task, even one that saw the socket, is in neither.

It is started from a clean environment (the task's base allow-list) with `/` as its working
directory and `-P`, so nothing a tenant wrote is on its path, and it holds no secret: everything
in its memory is what every task of the node may see. Only the node's own Python gets one (an
environment's venv could run code at import, which must happen inside a sandbox).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Iterable

from confinement.fork import exit_code
from training.exit_codes import EXIT_INFRA_ERROR

REQUEST_MAX_BYTES = 4096
ORDER_FDS = 5


def _serve(*, channel_fd: int | None, socket_path: str | None) -> None:
    # Listening before the import: a node that connects meanwhile waits for it, not for a
    # server of its own that imports it too.
    listener = _listen(path=socket_path) if socket_path is not None else None
    # The whole point: every task shares these imports.
    import training.trial.tfenv
    import training.trial.worker  # noqa: F401 - and the trial's own modules (0.1 s more)
    from training.isolation.seccomp import seccomp_bpf

    program = seccomp_bpf()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # each waiter is reaped by the kernel
    with selectors.DefaultSelector() as selector:
        if listener is not None:
            selector.register(listener, selectors.EVENT_READ, "listener")
        if channel_fd is not None:
            selector.register(socket.socket(fileno=channel_fd), selectors.EVENT_READ, "node")
        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "listener":
                    _accept(listener=sock, selector=selector)
                elif not _request_serve(channel=sock, program=program,
                                        others=selector.get_map().values()):
                    selector.unregister(sock)
                    sock.close()
                    if key.data == "node":
                        return  # its starter closed its end: it stopped, or died


def _listen(*, path: str) -> socket.socket:
    """The machine's socket, in a folder of this user's that no one else may enter."""
    folder = os.stat(os.path.dirname(path) or ".")
    if folder.st_uid != os.getuid() or folder.st_mode & 0o077:
        raise SystemExit(f"{os.path.dirname(path)} must be the server user's, mode 0700.")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket a stopped server left
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    return listener


def _accept(*, listener: socket.socket, selector: selectors.BaseSelector) -> None:
    try:
        connection, _ = listener.accept()
    except OSError:
        return
    if _peer_trusted(connection=connection):
        selector.register(connection, selectors.EVENT_READ, "peer")
    else:
        connection.close()


def _peer_trusted(*, connection: socket.socket) -> bool:
    """This user, in this user namespace: a sandboxed task is mapped into one of its own (and
    is no peer this process can see the pid of: SO_PEERCRED gives 0 then)."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                        struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", credentials)
    if pid <= 0 or uid != os.getuid():
        return False
    try:
        return os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino
    except OSError:
        return False


def _request_serve(*, channel: socket.socket, program: bytes,
                   others: Iterable[selectors.SelectorKey]) -> bool:
    """One request from `channel`; False once it is closed."""
    try:
        message, fds, _, _ = socket.recv_fds(channel, REQUEST_MAX_BYTES, ORDER_FDS)
    except OSError:
        return False
    if not message:
        return False
    try:
        child = os.fork() if len(fds) == ORDER_FDS else -1
    except OSError:
        child = -1  # the holder, left without its task, ends the attempt as retryable
    if child == 0:
        try:
            for key in others:  # no node's channel, nor the machine's socket, in a task
                with contextlib.suppress(OSError):
                    os.close(key.fd)
            _wait_for_task(holder_pid=int(json.loads(message)["holder_pid"]), fds=fds,
                           program=program)
        finally:
            os._exit(EXIT_INFRA_ERROR)  # never back into this loop: one server only
    for fd in fds:
        os.close(fd)
    return True


def _wait_for_task(*, holder_pid: int, fds: list[int], program: bytes) -> None:
    """The child per task: enters, forks the task, waits for it; never returns."""
    from training.trial.entry import namespaces_join

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pidfd, channel_fd, events_fd, log_fd, order_fd = fds
    holder = socket.socket(fileno=channel_fd)
    try:
        # Supplementary groups are the node's; the sandbox maps none of them.
        os.setgroups([])
        namespaces_join(pidfd=pidfd, pid=holder_pid)
        os.close(pidfd)
        task = os.fork()
    except OSError as error:
        _report(log_fd=log_fd, text=f"The task could not enter its sandbox: {error}\n")
        _holder_send(holder=holder, text=f"exit {EXIT_INFRA_ERROR}")
        os._exit(0)
    if task == 0:
        try:
            _become(order_fd=order_fd, holder=holder, events_fd=events_fd, log_fd=log_fd,
                    program=program)
        except BaseException:  # as a cold host's uncaught error: its traceback, then 1
            traceback.print_exc()
        finally:
            os._exit(1)
    for fd in (events_fd, log_fd, order_fd):
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(task, 0)
            break
        except InterruptedError:
            continue
    _holder_send(holder=holder, text=f"exit {exit_code(status=status)}")
    os._exit(0)


def _become(*, order_fd: int, holder: socket.socket, events_fd: int, log_fd: int,
            program: bytes) -> None:
    """The task, inside the sandbox; never returns. Its order is read only here, after the fork:
    it holds a workspace's tokens, which the server's memory (every later task's copy) never
    may."""
    from training.trial.entry import privileges_drop
    from training.trial.host import task_become

    try:
        os.setsid()  # bubblewrap's --new-session: no terminal to push input into
        privileges_drop(program=program)
        with os.fdopen(order_fd, "rb") as handle:
            order = json.loads(handle.read())
        kept = {events_fd, log_fd, holder.fileno()}
        os.closerange(3, min(kept))
        for fd in range(min(kept) + 1, max(kept)):
            if fd not in kept:
                with contextlib.suppress(OSError):
                    os.close(fd)
        os.closerange(max(kept) + 1, os.sysconf("SC_OPEN_MAX"))
        import numpy

        # Fresh entropy, as a cold process' import gets, until the trial seeds it: the fork
        # copied the server's state, which every task would otherwise share.
        numpy.random.seed()
        # Its pid in here, for the holder to pass signals to.
        _holder_send(holder=holder, text=f"pid {os.getpid()}")
        holder.close()
    except Exception:
        _report(log_fd=log_fd, text=traceback.format_exc())
        os._exit(EXIT_INFRA_ERROR)
    code = task_become(order=order, events_fd=events_fd, log_fd=log_fd, fork_first=False)
    with contextlib.suppress(OSError):  # a full disk under the log: the code still tells
        sys.stdout.flush()
        sys.stderr.flush()
    # TF's gRPC and collective threads can block interpreter shutdown; the outcome is decided.
    os._exit(code)


def _holder_send(*, holder: socket.socket, text: str) -> None:
    with contextlib.suppress(OSError):  # a holder already gone: the sandbox was killed
        holder.send(text.encode())


def _report(*, log_fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(log_fd, text.encode())


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m training.trial.forkserver")
    parser.add_argument("--channel-fd", type=int,
                        help="its starter's channel; the server ends when it closes")
    parser.add_argument("--socket", help="the machine's: a path to listen on")
    args = parser.parse_args()
    if args.channel_fd is None and args.socket is None:
        parser.error("--channel-fd, --socket or both")
    _serve(channel_fd=args.channel_fd, socket_path=args.socket)
    # Skipping the interpreter's teardown of TensorFlow: nothing ran here that needs it.
    os._exit(0)


if __name__ == "__main__":
    _main()
