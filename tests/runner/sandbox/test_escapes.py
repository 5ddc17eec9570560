"""The sandbox's walls under attack (sandbox.md §7: the host's files, secrets and
sockets, OS-level escapes, other runs, planted links, and isolation that is not there).
Each attack is bounded, and each test asserts what the host sees (its files, its
listeners, its processes), not what the guest says of itself.

Skipped, loudly, without bubblewrap; a failure instead under PARKWAY_REQUIRE_SANDBOX=1.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parkway.runner.sandbox import BwrapProvider, Limits, RunRequest
from tests.helpers.sandbox_rig import (
    SANDBOX_UID,
    run,
    shared_folder,
    skip_without_bwrap,
    write,
)

skip_without_bwrap()

ROOT = Path(__file__).resolve().parents[3]


# -- 7, 8, 9, 10: the host's files and secrets -------------------------------------


async def test_writes_outside_the_work_dir_change_nothing_on_the_host(
    provider: BwrapProvider,
) -> None:
    """World-writable host folders and files, the inputs and the library mounts, /tmp,
    root's home and the server's tree: nothing is created or changed."""
    token = secrets.token_hex(8)
    with shared_folder(0o777) as open_dir, shared_folder(0o777) as library:
        victim = write(open_dir / "victim.txt", "original", 0o666)
        data = write(open_dir / "data.txt", "input", 0o666)
        (library / "library").mkdir(mode=0o777)
        init = write(library / "library" / "__init__.py", "X = 1\n", 0o666)
        targets = [
            f"{open_dir}/escape-{token}",
            str(victim),
            f"/tmp/escape-{token}",
            f"/root/escape-{token}",
            f"{ROOT}/escape-{token}",
            "/inputs/data",
            "/library-root/library/__init__.py",
            f"/library-root/escape-{token}",
            "/usr/escape",
            "/escape",
        ]
        code = """
            import os
            refused = 0
            for path in args:
                try:
                    with open(path, "w") as f:
                        f.write("escaped")
                except OSError:
                    refused += 1
            refused
        """
        done = await run(provider, code, args=targets, inputs={"data": data}, library=library)
        assert done.status == "ok", done
        assert done.result == len(targets), "a write inside the sandbox succeeded"
        assert victim.read_text() == "original"
        assert data.read_text() == "input"
        assert init.read_text() == "X = 1\n"
        assert not list(open_dir.glob("escape-*")) and not list(library.glob("escape-*"))
        assert not Path(f"/tmp/escape-{token}").exists()
        assert not Path(f"/root/escape-{token}").exists()
        assert not (ROOT / f"escape-{token}").exists()


async def test_etc_passwd_and_shadow_are_not_there(provider: BwrapProvider) -> None:
    """Reading /etc/passwd and /etc/shadow yields nothing of the host's."""
    code = """
        for path in ("/etc/passwd", "/etc/shadow"):
            try:
                print(open(path).read())
            except OSError as exc:
                print(type(exc).__name__)
    """
    done = await run(provider, code)
    assert done.status == "ok", done
    assert done.stdout == b"FileNotFoundError\nFileNotFoundError\n"
    assert b"root:" not in done.stdout + done.stderr


async def test_no_host_secret_in_the_environment_or_any_proc_environ(
    provider: BwrapProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's secret (in its environment) is in neither the program's
    environment nor any /proc/*/environ it can read (bwrap's own included)."""
    secret = "parkway-secret-" + secrets.token_hex(16)
    monkeypatch.setenv("PARKWAY_SANDBOX_TEST_SECRET", secret)
    code = """
        import os
        print(sorted(os.environ))
        for pid in os.listdir("/proc"):
            for name in ("environ", "cmdline"):
                try:
                    print(pid, name, open(f"/proc/{pid}/{name}", "rb").read())
                except OSError as exc:
                    print(pid, name, exc)
        try:  # the parent is outside the pid namespace: ppid 0, no such entry
            print(open(f"/proc/{os.getppid()}/environ", "rb").read())
        except OSError as exc:
            print("ppid", os.getppid(), type(exc).__name__)
    """
    done = await run(provider, code)
    assert done.status == "ok", done
    assert done.stdout.startswith(b"['HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']\n")
    assert b"ppid 0 FileNotFoundError" in done.stdout
    assert secret.encode() not in done.stdout + done.stderr
    assert b"PARKWAY_SANDBOX_TEST_SECRET" not in done.stdout


async def test_the_servers_files_and_cwd_are_unreachable(provider: BwrapProvider) -> None:
    """A world-readable config beside the server, the server's own tree, and the
    parent's cwd through /proc stay out of reach."""
    token = "parkway-config-" + secrets.token_hex(8)
    with shared_folder() as folder:
        config = write(folder / "config.toml", f"secret = '{token}'\n")
        code = """
            import os
            for path in args:
                try:
                    print(open(path).read())
                except OSError as exc:
                    print(path, type(exc).__name__)
            for link in ("/proc/1/cwd", f"/proc/{os.getppid()}/cwd", "/proc/1/root"):
                try:
                    print(os.readlink(link), os.listdir(link))
                except OSError as exc:
                    print(link, type(exc).__name__)
        """
        targets = [str(config), f"{ROOT}/pyproject.toml", "/proc/1/cwd/pyproject.toml"]
        done = await run(provider, code, args=targets)
    assert done.status == "ok", done
    assert token.encode() not in done.stdout
    assert b"[build-system]" not in done.stdout
    assert b"pyproject.toml" not in done.stdout.replace(b"/pyproject.toml FileNotFound", b"")


# -- 11: sockets ------------------------------------------------------------------


async def test_no_socket_reaches_the_host(provider: BwrapProvider) -> None:
    """TCP and UDP to loopback listeners, a pathname and an abstract Unix socket the
    host opens, DNS: no listener ever gets a connection or a datagram."""
    abstract = f"\0parkway-sandbox-{secrets.token_hex(6)}"
    with shared_folder() as folder:
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(str(folder / "host.sock"))
        (folder / "host.sock").chmod(0o777)
        unix.listen()
        hidden = socket.socket(socket.AF_UNIX)
        hidden.bind(abstract)
        hidden.listen()
        listeners = (tcp, udp, unix, hidden)
        for sock in listeners:
            sock.setblocking(False)
        code = """
            import socket
            outcomes = {}
            def attempt(name, family, kind, address, datagram=False):
                try:
                    with socket.socket(family, kind) as s:
                        s.settimeout(1)
                        if datagram:
                            s.sendto(b"escaped", address)
                            outcomes[name] = "sent"  # into the sandbox's own loopback
                        else:
                            s.connect(address)
                            s.sendall(b"escaped")
                            outcomes[name] = "connected"
                except OSError as exc:
                    outcomes[name] = type(exc).__name__
            attempt("tcp", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", args["tcp"]))
            attempt("udp", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", args["udp"]), True)
            attempt("unix", socket.AF_UNIX, socket.SOCK_STREAM, args["unix"])
            attempt("abstract", socket.AF_UNIX, socket.SOCK_STREAM, "\\0" + args["abstract"])
            attempt("dns", socket.AF_INET, socket.SOCK_DGRAM, ("1.1.1.1", 53), True)
            try:
                socket.getaddrinfo("example.com", 80)
                outcomes["getaddrinfo"] = "resolved"
            except OSError as exc:
                outcomes["getaddrinfo"] = type(exc).__name__
            outcomes
        """
        ports = {
            "tcp": tcp.getsockname()[1],
            "udp": udp.getsockname()[1],
            "unix": str(folder / "host.sock"),
            "abstract": abstract[1:],
        }
        try:
            done = await run(provider, code, args=ports)
            assert done.status == "ok", done
            for sock in (tcp, unix, hidden):
                with pytest.raises(BlockingIOError):
                    sock.accept()
            with pytest.raises(BlockingIOError):
                udp.recvfrom(64)
        finally:
            for sock in listeners:
                sock.close()
    # what the guest saw agrees: nothing answered (its own loopback is empty)
    assert done.result["tcp"] == "ConnectionRefusedError"
    assert done.result["unix"] == "FileNotFoundError"
    assert done.result["abstract"] == "ConnectionRefusedError"
    assert done.result["dns"] == "OSError" and done.result["getaddrinfo"] == "gaierror"


# -- 13, 15, 16, 17: escapes through the OS, crashes, stdin, odd output ----------


async def test_os_and_ctypes_escapes_have_no_effect_outside(
    provider: BwrapProvider, leftovers: None
) -> None:
    """libc.system, subprocess, os.kill of a host process of the same uid (and kill(-1)),
    raising rlimits: the host marker files stay absent, the host process stays alive."""
    with shared_folder(0o777) as folder:
        victim = subprocess.Popen(
            ["sleep", "60"], user=SANDBOX_UID, group=SANDBOX_UID, extra_groups=[]
        )
        try:
            code = """
                import ctypes, os, resource, signal, subprocess
                outcomes = {}
                libc = ctypes.CDLL(None)
                outcomes["system"] = libc.system(f"touch {args['folder']}/m1".encode())
                try:
                    subprocess.run(["/bin/sh", "-c", f"touch {args['folder']}/m2"], timeout=2)
                    outcomes["subprocess"] = "ran"
                except OSError as exc:
                    outcomes["subprocess"] = type(exc).__name__
                for target in (args["victim"], args["server"], -1):
                    try:
                        os.kill(target, signal.SIGKILL)
                        outcomes[f"kill {target}"] = "sent"
                    except OSError as exc:
                        outcomes[f"kill {target}"] = type(exc).__name__
                try:
                    resource.setrlimit(resource.RLIMIT_NPROC, (10_000, 10_000))
                    outcomes["raise"] = "raised"
                except (ValueError, OSError) as exc:
                    outcomes["raise"] = type(exc).__name__
                outcomes
            """
            args = {"folder": str(folder), "victim": victim.pid, "server": os.getpid()}
            done = await run(provider, code, args=args)
            assert done.status == "ok", done
            assert victim.poll() is None, "the host process was killed from the sandbox"
            assert not (folder / "m1").exists() and not (folder / "m2").exists()
            assert done.result["raise"] == "ValueError"
        finally:
            victim.kill()
            victim.wait()


# -- 18, 19, 20: other runs, planted links, no isolation ----------------------------


async def test_a_concurrent_run_sees_nothing_of_another(provider: BwrapProvider) -> None:
    """Run A keeps a secret file and a child process, then (through its broker) starts
    run B while it waits: B finds neither A's files nor A's processes."""
    token = "parkway-run-a-" + secrets.token_hex(8)
    snoop = """
        import os
        found = []
        for top, dirs, files in os.walk("/"):
            if top.startswith("/proc") or top.startswith("/usr") or top.startswith("/sys"):
                dirs.clear()
                continue
            found += [os.path.join(top, f) for f in files]
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        for pid in pids:
            try:
                print(open(f"/proc/{pid}/cmdline", "rb").read())
            except OSError:
                pass
        {"files": found, "pids": pids}
    """
    seen: list[Any] = []

    async def broker(name: str, tool_input: Any) -> Any:
        inner = await provider.run(RunRequest(code=snoop.replace("\n        ", "\n")))
        seen.append(inner)
        return inner.result

    code = """
        import os, time
        with open(f"/work/{args}", "w") as f:
            f.write(args)
        if os.fork() == 0:
            time.sleep(10)
            os._exit(0)
        tools.call("snoop")
    """
    done = await run(provider, code, args=token, broker=broker)
    assert done.status == "ok", done
    (snooped,) = seen
    assert snooped.status == "ok", snooped
    assert token.encode() not in snooped.stdout + snooped.stderr
    assert not [f for f in snooped.result["files"] if token in f]
    assert snooped.result["pids"] == [1], "B sees processes other than its own"


async def test_links_planted_in_the_work_dir_are_not_followed(provider: BwrapProvider) -> None:
    """The host collects no files from the sandbox: links planted in /work to host
    paths change nothing, and the only host file a run writes is its stdout spill, a
    fresh regular file in the caller's folder holding exactly the program's stdout."""
    with shared_folder(0o777) as folder, shared_folder() as spill:
        victim = write(folder / "victim.txt", "original", 0o666)
        code = """
            import os, sys
            for name, target in (("stdout-x.out", args), ("passwd", "/etc/passwd"),
                                 ("spill", "/proc/self/fd/1")):
                os.symlink(target, f"/work/{name}")
            sys.stdout.write("y" * 100_000)
        """
        limits = Limits(stdout_inline_bytes=16 * 2**10)
        done = await run(provider, code, args=str(victim), limits=limits, spill_dir=spill)
        assert done.status == "ok", done
        assert [p.name for p in spill.iterdir()] == [done.stdout_spill.name]
        assert not done.stdout_spill.is_symlink() and done.stdout_spill.is_file()
        assert done.stdout_spill.read_bytes() == b"y" * 100_000
        assert victim.read_text() == "original"


async def test_missing_bwrap_is_unavailable_and_never_runs_the_code() -> None:
    """Pointed at a missing bwrap, check() names the fix, and run() answers
    unavailable without running the program some other way (its host marker is absent)."""
    with shared_folder(0o777) as folder:
        marker = folder / "ran"
        broken = BwrapProvider(bwrap="/nonexistent/bwrap")
        with pytest.raises(Exception, match="apt-get install bubblewrap") as raised:
            broken.check()
        assert type(raised.value).__name__ == "SandboxUnavailable"
        done = await broken.run(RunRequest(code=f"open({str(marker)!r}, 'w').write('ran')"))
        assert done.status == "unavailable" and "apt-get install bubblewrap" in done.message
        assert not done.isolation.confined
        assert not marker.exists()


async def test_refused_user_namespaces_are_unavailable_with_the_fix() -> None:
    """A bwrap that cannot create namespaces (here: a stand-in that fails as bwrap does
    on Ubuntu's AppArmor restriction) makes the provider unavailable, naming the sysctl;
    the program never runs."""
    with shared_folder() as folder:
        marker = folder / "ran"
        fake = write(
            folder / "bwrap",
            "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
            0o755,
        )
        broken = BwrapProvider(bwrap=str(fake))
        done = await broken.run(RunRequest(code=f"open({str(marker)!r}, 'w').write('ran')"))
        assert done.status == "unavailable", done
        assert "kernel.apparmor_restrict_unprivileged_userns=0" in done.message
        assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a root host with a 0700 home")
async def test_an_interpreter_the_sandbox_uid_cannot_read_is_unavailable(
    provider: BwrapProvider,
) -> None:
    """The server's own Python under root's 0700 home cannot run in the sandbox: the
    probe says so, and what to use instead."""
    python = os.path.realpath(sys.executable)
    if not python.startswith("/root/"):
        pytest.skip("the test interpreter is not under root's home")
    done = await BwrapProvider(python=python).run(RunRequest(code="1"))
    assert done.status == "unavailable", done
    assert "not readable by uid 65534" in done.message
    assert "/usr/bin/python3" in done.message
