"""Ways a console script's main can end, for tests/test_commands.py (imports nothing heavy:
a fresh interpreter runs each too)."""

import sys


def returns_none():
    return None


def exits_3():
    sys.exit(3)


def exits_with_a_message():
    sys.exit("a message")


def raises():
    raise ValueError("an error")


def interrupted():
    raise KeyboardInterrupt


def is_a_main_process():
    """0 where multiprocessing sees a fresh interpreter's main process (Tango sets a start
    method, and logs from its main process only), else 5."""
    import multiprocessing

    fresh = (
        multiprocessing.current_process().name == "MainProcess"
        and multiprocessing.parent_process() is None
        and multiprocessing.get_start_method(allow_none=True) is None
        and not multiprocessing.active_children()
    )
    return 0 if fresh else 5


def says_goodbye_at_exit():
    """An `atexit` handler, and a file object that only shutdown flushes (buffered, unclosed)."""
    import atexit

    atexit.register(print, "goodbye")
    sys.stdout.write("unflushed")
    return 4


def a_thread_outlives_main():
    """Shutdown waits for a non-daemon thread before `atexit`."""
    import atexit
    import threading
    import time

    atexit.register(print, "atexit after the thread")
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()


ALL = [
    returns_none,
    exits_3,
    exits_with_a_message,
    raises,
    interrupted,
    is_a_main_process,
    says_goodbye_at_exit,
    a_thread_outlives_main,
]
