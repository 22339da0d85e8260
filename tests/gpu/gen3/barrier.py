"""The common start of a scenario's members (gen3_bench's `--start-file`): each member, ready
(imports, model, warm-up done), says so beside the file and waits for the bench to write the
start time into it, once every member is ready. A member never waits more than `limit` s (the
bench is gone): it then starts at once."""
import os
import time


def wait_for_start(start_file, limit=600.0):
    """The epoch at which the measured window begins."""
    open("%s.ready.%d" % (start_file, os.getpid()), "w").close()
    deadline = time.time() + limit
    while not os.path.exists(start_file) and time.time() < deadline:
        time.sleep(0.005)
    try:
        with open(start_file) as f:
            return float(f.read())
    except (OSError, ValueError):
        return time.time()
