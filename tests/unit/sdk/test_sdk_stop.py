"""should_stop() and the lazy top-level names. Signal handlers are process-wide, so every
test runs its own Python: the test process keeps its own SIGTERM behaviour."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap


def run(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_should_stop_after_sigterm() -> None:
    proc = run(
        """
        import os, signal, time
        import taugrid
        assert taugrid.should_stop() is False
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not taugrid.should_stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("stopped", taugrid.should_stop())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped True"


def test_without_the_sdk_sigterm_still_kills() -> None:
    proc = run(
        "import os, signal, time, taugrid\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(5)\n"
        "print('survived')"
    )
    assert proc.returncode == -signal.SIGTERM and "survived" not in proc.stdout


def test_handler_installed_on_import_of_the_module() -> None:
    proc = run(
        """
        import os, signal, time
        import taugrid.sdk.stop as stop
        assert signal.getsignal(signal.SIGTERM) is stop._on_sigterm
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(stop.should_stop())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_a_previous_python_handler_is_chained() -> None:
    proc = run(
        """
        import os, signal, time
        calls = []
        signal.signal(signal.SIGTERM, lambda s, f: calls.append(s))
        from taugrid import should_stop
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(should_stop(), calls == [signal.SIGTERM])
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True True"


def test_sig_ign_is_left_alone() -> None:
    proc = run(
        """
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        import taugrid
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(taugrid.should_stop(), signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False True"


def test_first_import_from_a_thread_installs_on_first_main_thread_call() -> None:
    proc = run(
        """
        import os, signal, threading, time
        t = threading.Thread(target=lambda: __import__("taugrid.sdk.stop"))
        t.start(); t.join()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        from taugrid.sdk.stop import should_stop
        assert should_stop() is False
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(should_stop())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_import_taugrid_stays_light_and_names_are_lazy() -> None:
    proc = run(
        """
        import sys, signal
        import taugrid
        heavy = [m for m in sys.modules if m.startswith("taugrid.sdk") or m in
                 ("numpy", "torch", "pydantic", "typing", "json", "hashlib")]
        assert heavy == [], heavy
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert {"checkpoint", "log", "should_stop", "__version__"} <= set(dir(taugrid))
        from taugrid.sdk import checkpoint
        assert taugrid.checkpoint is checkpoint
        from taugrid.sdk.metrics import log
        assert taugrid.log is log
        assert "taugrid.sdk.stop" not in sys.modules
        assert callable(taugrid.should_stop)
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
        try:
            taugrid.nope
        except AttributeError as e:
            print("ok", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok module 'taugrid' has no attribute 'nope'")


def test_sdk_imports_only_the_standard_library() -> None:
    proc = run(
        """
        import sys
        before = set(sys.modules)
        import taugrid.sdk.checkpoint, taugrid.sdk.metrics, taugrid.sdk.stop
        new = {m.split(".")[0] for m in set(sys.modules) - before}
        stdlib = set(sys.stdlib_module_names) | {"taugrid"}
        print(sorted(new - stdlib))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
