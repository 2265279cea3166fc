"""The first process inside a `SandboxRuntime` sandbox (rollkit.programs.sandbox_runtime starts it).

Run by bubblewrap as `python -I -S <this file> CONFIG`, it imports nothing of
rollkit. CONFIG (JSON) holds `relays` ([port, unix socket path] pairs),
`limits` (resource name -> value), `status_fd` and `argv`. It:

1. listens on the sandbox's own loopback at 127.0.0.1:port for each relay
   and forwards every connection to the Unix socket bound in from outside
   (where rollkit forwards it to the real 127.0.0.1:port, or to its proxy);
2. starts `argv` with the resource limits set;
3. when the program exits, writes `{"status": ..., "signal": ...}` to
   `status_fd` and exits itself, which ends the sandbox's PID namespace: the
   kernel kills every process left in it (daemons, setsid children).

It must stay small and fast: it runs once per program launch.
"""

import json
import os
import resource
import signal
import socket
import sys
import threading

_LIMITS = {
    "processes": resource.RLIMIT_NPROC,
    "open_files": resource.RLIMIT_NOFILE,
    "memory_bytes": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "file_bytes": resource.RLIMIT_FSIZE,
}


def _pipe(source, target):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _serve(listener, path):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()


def main():
    config = json.loads(sys.argv[1])
    listeners = []
    for port, path in config["relays"]:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(128)
        listeners.append((listener, path))
    status_fd = int(config["status_fd"])
    os.set_inheritable(status_fd, False)
    argv = config["argv"]
    pid = os.fork()
    if pid == 0:
        try:
            for listener, _ in listeners:
                listener.close()
            # Python ignores these at start, and an ignored signal stays
            # ignored across exec: the program gets the defaults, as from a shell.
            for signum in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(signum, signal.SIG_DFL)
            for name, value in config["limits"].items():
                if value is not None:
                    # CPU: SIGXCPU at the soft limit (reported), SIGKILL a second later.
                    hard = int(value) + 1 if name == "cpu_seconds" else int(value)
                    resource.setrlimit(_LIMITS[name], (int(value), hard))
            os.execv(argv[0], argv)
        except OSError as exc:
            os.write(2, f"sandbox: cannot run {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    # The relays never read stdin: the program alone holds the pipes.
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    for listener, path in listeners:
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        report = {"status": -os.WTERMSIG(status), "signal": os.WTERMSIG(status)}
    else:
        report = {"status": os.WEXITSTATUS(status), "signal": None}
    try:
        os.write(status_fd, json.dumps(report).encode())
    except OSError:
        pass
    os._exit(report["status"] if report["status"] >= 0 else 128 + report["signal"])


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    main()
