#!/usr/bin/python3
# Drives kazoo's SetPartitioner for the batch bench (benches/batch.rs): one long-lived process
# that takes commands on standard input, so that it is set up once and then measured turn by
# turn with our Partitioner, on the same server in the same run. One line per command; every
# answer is one line. Run with Debian's /usr/bin/python3 (python3-kazoo).
#
#   clients N                      open N KazooClients (each its own session): OK
#   rep PATH ITEMS WORKERS BOUNDARY  WORKERS partitioners share ITEMS items at PATH; once
#                                  settled (not timed), one more joins (timed until settled),
#                                  then the first one leaves with finish() (timed until
#                                  settled); then every partitioner finishes and PATH is
#                                  removed. BOUNDARY is kazoo's time_boundary, in seconds:
#                                  RESULT <join ms> <leave ms>
#   quit
#
# Settled: every partitioner in the ACQUIRED state, and each one's set exactly the one kazoo's
# own partition function gives it for the current members (so every item is owned by exactly
# one worker). Detection is driven by the partitioners' state-change events (one shared
# event), with a 5 ms poll as a fallback: a state change is what ends the wait.
#
# kazoo leaves the reaction to the application: a partitioner in the RELEASE state waits for
# release_set(). Each worker here has a driver thread that does so the moment its partitioner
# asks (its docs' loop, woken by its state-change event).
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NotEmptyError
from kazoo.recipe.partitioner import SetPartitioner

clients = []


class Fanout(object):
    """A state-change event that wakes both the worker's driver and the settled check."""

    def __init__(self, own, shared):
        self.own = own
        self.shared = shared

    def set(self):
        self.own.set()
        self.shared.set()


class Worker(object):
    def __init__(self, client, path, items, ident, boundary, shared):
        self.ident = ident
        self.own = threading.Event()
        self.stopping = False
        # release_set() (the driver) and finish() (leave) must not run together: both walk
        # the partitioner's list of locks.
        self.calls = threading.Lock()
        self.partitioner = SetPartitioner(
            client, path, items, identifier=ident, time_boundary=boundary,
            state_change_event=Fanout(self.own, shared))
        self.thread = threading.Thread(target=self._drive, daemon=True)
        self.thread.start()

    def _drive(self):
        p = self.partitioner
        while True:
            # Cleared before the look: a change after it sets the event again.
            self.own.clear()
            with self.calls:
                if self.stopping or p.failed:
                    return
                if p.release:
                    p.release_set()
                    continue
            self.own.wait()

    def stop(self):
        """No more reactions: a partitioner told to release from now on is left as it is."""
        with self.calls:
            self.stopping = True

    def leave(self):
        with self.calls:
            self.stopping = True
            self.partitioner.finish()
        self.own.set()
        self.thread.join(30)


def settled(workers, items):
    idents = sorted(w.ident for w in workers)
    ordered = sorted(items)
    owners = {}
    for w in workers:
        p = w.partitioner
        if not p.acquired:
            return False
        mine = list(p)
        if mine != ordered[idents.index(w.ident)::len(idents)]:
            return False
        for item in mine:
            owners[item] = owners.get(item, 0) + 1
    return len(owners) == len(items) and all(n == 1 for n in owners.values())


def wait_settled(workers, items, shared, limit=60.0):
    give_up = time.monotonic() + limit
    while True:
        shared.clear()
        if settled(workers, items):
            return time.perf_counter()
        if time.monotonic() > give_up:
            raise RuntimeError("kazoo's partitioners did not settle in %.0f s" % limit)
        shared.wait(0.005)


def rep(path, n_items, n_workers, boundary):
    items = ["item-%02d" % i for i in range(n_items)]
    shared = threading.Event()
    workers = []
    try:
        for i in range(n_workers):
            workers.append(Worker(clients[i], path, items, "w%d" % i, boundary, shared))
        wait_settled(workers, items, shared)
        started = time.perf_counter()
        workers.append(Worker(clients[n_workers], path, items, "w%d" % n_workers, boundary,
                              shared))
        joined = wait_settled(workers, items, shared) - started
        started = time.perf_counter()
        leaver = workers.pop(0)
        leaver.leave()
        left = wait_settled(workers, items, shared) - started
    finally:
        # The clean-up after the figures. Every driver stops first, so that no partitioner
        # starts allocating again while the others finish (a finish() during an allocation
        # would leave that allocation's locks behind).
        for w in workers:
            w.stop()
        for w in workers:
            try:
                w.leave()
            except Exception:
                pass
    try:
        clients[0].delete(path, recursive=True)
    except NotEmptyError:
        pass  # a node made meanwhile: the path is not used again
    return "RESULT %.3f %.3f" % (joined * 1000.0, left * 1000.0)


def main():
    connect = sys.argv[1]
    try:
        for line in sys.stdin:
            w = line.split()
            if not w:
                continue
            try:
                if w[0] == "clients":
                    while len(clients) < int(w[1]):
                        c = KazooClient(hosts=connect, timeout=30.0)
                        c.start(timeout=30)
                        clients.append(c)
                    answer = "OK"
                elif w[0] == "rep":
                    answer = rep(w[1], int(w[2]), int(w[3]), float(w[4]))
                elif w[0] == "quit":
                    return
                else:
                    answer = "ERROR unknown command " + w[0]
            except Exception as e:  # the bench reads the error as this command's answer
                answer = "ERROR %s: %s" % (type(e).__name__, str(e).replace("\n", " "))
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()
    finally:
        for c in clients:
            try:
                c.stop()
                c.close()
            except Exception:
                pass


if __name__ == "__main__":
    main()
