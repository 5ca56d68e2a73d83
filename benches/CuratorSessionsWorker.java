// The sessions bench's Curator worker (benches/sessions.rs): `sessions` CuratorFramework
// clients in one JVM, each its own session, the way a Curator user connects them. The protocol
// on stdin/stdout is the Rust worker's:
//   `base <rss KB> <threads> <maps> <open files>` at start (this process's, from /proc/self);
//   `connect`: connects every client (64 at a time), then
//     `connected <ms> <rss KB> <threads> <maps> <open files>`;
//   `jit` (before `answering`, any number of times): `jit <ms>`, the JVM's compile time so far;
//   `answering <ns> <killed ns>` (the server answers again since that System.nanoTime instant,
//     which is the machine's CLOCK_MONOTONIC on Linux, the Rust side's clock; it was killed at
//     the second, and only what a client says after it counts): waits until every client
//     is RECONNECTED (on its session id: another id counts as lost) or LOST (at most a session
//     timeout), then
//     `back <count> <lost> <ms from the kill to the last LOST, or -1> <ms after answering,
//     per client back>...`;
//   stdin closed: closes the clients and exits.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

public class CuratorSessionsWorker {
    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** `<rss KB> <threads> <maps> <open files>` of this process. */
    static String usage() throws Exception {
        long rss = 0;
        long threads = 0;
        for (String l : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (l.startsWith("VmRSS:")) {
                rss = Long.parseLong(l.substring(6).trim().split("\\s+")[0]);
            } else if (l.startsWith("Threads:")) {
                threads = Long.parseLong(l.substring(8).trim());
            }
        }
        long maps = Files.readAllLines(Paths.get("/proc/self/maps")).size();
        String[] fds = new java.io.File("/proc/self/fd").list();
        return rss + " " + threads + " " + maps + " " + (fds == null ? 0 : fds.length);
    }

    /** The client's session id now (0 if it has no handle). */
    static long sessionOf(CuratorFramework c) {
        try {
            return c.getZookeeperClient().getZooKeeper().getSessionId();
        } catch (Exception e) {
            return 0;
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessions = Integer.parseInt(args[1]);
        int sessionMs = Integer.parseInt(args[2]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        say("base " + usage());
        if (!"connect".equals(in.readLine())) {
            return;
        }
        // (client index, nanoTime, 1 back on its session or 0 lost), as the clients say them.
        LinkedBlockingQueue<long[]> settled = new LinkedBlockingQueue<>();
        long began = System.nanoTime();
        ExecutorService pool = Executors.newFixedThreadPool(64);
        List<Future<CuratorFramework>> connecting = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            final int index = i;
            connecting.add(pool.submit(() -> {
                CuratorFramework c = CuratorFrameworkFactory.builder()
                        .connectString(connect)
                        .sessionTimeoutMs(sessionMs)
                        .connectionTimeoutMs(120000)
                        .retryPolicy(new RetryNTimes(3, 100))
                        .build();
                boolean[] left = new boolean[1];
                java.util.concurrent.atomic.AtomicLong session = new java.util.concurrent.atomic.AtomicLong();
                c.getConnectionStateListenable().addListener((client, state) -> {
                    if (state == ConnectionState.SUSPENDED) {
                        left[0] = true;
                    } else if (state == ConnectionState.RECONNECTED && left[0]) {
                        left[0] = false;
                        // On another session id (or none known) it is a new session, not the old
                        // one's return.
                        long id = sessionOf(client);
                        boolean same = id != 0 && id == session.get();
                        settled.add(new long[] {index, System.nanoTime(), same ? 1 : 0});
                    } else if (state == ConnectionState.LOST) {
                        settled.add(new long[] {index, System.nanoTime(), 0});
                    }
                });
                c.start();
                if (!c.blockUntilConnected(120, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("no session within 120 s");
                }
                session.set(sessionOf(c));
                return c;
            }));
        }
        List<CuratorFramework> clients = new ArrayList<>();
        for (Future<CuratorFramework> f : connecting) {
            clients.add(f.get());
        }
        pool.shutdown();
        double took = (System.nanoTime() - began) / 1e6;
        say(String.format(java.util.Locale.ROOT, "connected %.1f %s", took, usage()));
        // `jit` (any number of times, before the restart) asks for this JVM's compile time so
        // far, in ms: the bench waits for the JIT to be quiet before it kills the server.
        java.lang.management.CompilationMXBean jit =
                java.lang.management.ManagementFactory.getCompilationMXBean();
        String line = in.readLine();
        while ("jit".equals(line)) {
            say("jit " + jit.getTotalCompilationTime());
            line = in.readLine();
        }
        if (line == null || !line.startsWith("answering ")) {
            return;
        }
        String[] when = line.substring(10).trim().split(" ");
        long answering = Long.parseLong(when[0]);
        long killed = Long.parseLong(when[1]);
        long[] back = new long[sessions];
        java.util.Arrays.fill(back, Long.MIN_VALUE);
        boolean[] settledOnce = new boolean[sessions];
        int lost = 0;
        long lastLost = Long.MIN_VALUE;
        int done = 0;
        long until = System.nanoTime() + sessionMs * 1_000_000L;
        while (done < sessions) {
            long left = until - System.nanoTime();
            if (left <= 0) {
                break;
            }
            long[] e = settled.poll(left, TimeUnit.NANOSECONDS);
            if (e == null) {
                break;
            }
            // Each client settles once, by its first word after the kill (what it said before,
            // a flap say, is not the restart's outcome): a RECONNECTED after a LOST is a new
            // session's, not the lost one's return.
            int i = (int) e[0];
            if (settledOnce[i] || e[1] < killed) {
                continue;
            }
            settledOnce[i] = true;
            done++;
            if (e[2] == 0) {
                lost++;
                lastLost = Math.max(lastLost, e[1]);
            } else {
                back[i] = e[1];
            }
        }
        StringBuilder out = new StringBuilder();
        int count = 0;
        for (long at : back) {
            if (at != Long.MIN_VALUE) {
                count++;
                out.append(String.format(java.util.Locale.ROOT, " %.1f", (at - answering) / 1e6));
            }
        }
        double last = lastLost == Long.MIN_VALUE ? -1 : (lastLost - killed) / 1e6;
        say(String.format(java.util.Locale.ROOT, "back %d %d %.1f%s", count, lost, last, out));
        while (in.readLine() != null) {
            // Until stdin closes.
        }
        for (CuratorFramework c : clients) {
            c.close();
        }
    }
}
