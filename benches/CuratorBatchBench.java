// Drives Apache Curator 5.4 for the batch bench (benches/batch.rs): a long-lived JVM that
// takes commands on standard input, so that it is warmed once and then measured turn by turn
// with our recipes, on the same server in the same run. One line per command; every answer is
// one line.
//
//   clients N                     open N clients (each its own session): OK
//   warm PATH MAXSECS             run every loop below until the JIT has been quiet for a
//                                 second (and at least 2 s; at most MAXSECS): WARM <seconds>
//                                 <compile ms> <quiet|busy>
//   barrier PATH N ROUNDS LIMITMS N participants (clients 0..N-1, a thread each) run ROUNDS
//                                 rounds of a DistributedDoubleBarrier, round r at PATH/r<r>:
//                                 every participant enters then leaves, each call given
//                                 LIMITMS. A round lasts from the first participant's start to
//                                 the last one's leave returning. A round not over within twice
//                                 LIMITMS (or whose calls failed) ends the block: its
//                                 participants are interrupted, and it is counted as failed:
//                                 RESULT <rounds done> <p50 us> <p99 us> <cpu ns per round>
//                                        <failed: 0 or 1> <each round's us>...
//                                 (Curator 5.4's enter can wait without its timeout: in
//                                 internalEnter, once its watcher has already fired, it calls
//                                 Object.wait() untimed. Seen at N = 32 on 2 cores.)
//   multi PATH ROUNDS             InterProcessMultiLock over InterProcessMutexes at PATH/l0..l3
//                                 on client 0, uncontended: RESULT <rounds> <acquire p50 us>
//                                 <acquire p99 us> <release p50 us> <release p99 us> <cpu ns
//                                 per round>
//   multirun PATH N MILLIS        N contenders (clients 0..N-1), each its own multi-lock over
//                                 the same four paths, acquire and release for MILLIS:
//                                 RESULT <acquisitions> <per second> <cpu ns per acquisition>
//   quit
//
// The loops are the Rust side's own (benches/batch.rs), step for step.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBatchBench {
    static final List<CuratorFramework> clients = new ArrayList<>();
    static String connect;
    /// The longest any one enter, leave or acquire may take before the bench calls it broken.
    static final long LIMIT_SECS = 60;
    static final long WARM_LIMIT_MS = 10_000;

    public static void main(String[] args) throws Exception {
        connect = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        try {
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split(" ");
                String answer;
                try {
                    switch (w[0]) {
                        case "clients": openClients(Integer.parseInt(w[1])); answer = "OK"; break;
                        case "warm": answer = warm(w[1], Long.parseLong(w[2])); break;
                        case "barrier":
                            answer = barrier(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]),
                                Long.parseLong(w[4]));
                            break;
                        case "multi": answer = multi(w[1], Integer.parseInt(w[2])); break;
                        case "multirun":
                            answer = multirun(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]));
                            break;
                        case "quit": return;
                        default: answer = "ERROR unknown command " + w[0];
                    }
                } catch (Exception e) {
                    answer = "ERROR " + e.toString().replace('\n', ' ');
                }
                System.out.println(answer);
                System.out.flush();
            }
        } finally {
            for (CuratorFramework c : clients) c.close();
            // A participant stuck in Curator must not keep the JVM alive.
            System.exit(0);
        }
    }

    static void openClients(int n) throws Exception {
        while (clients.size() < n) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(
                connect, 30000, 15000, new ExponentialBackoffRetry(50, 10));
            c.start();
            c.blockUntilConnected();
            clients.add(c);
        }
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    static double pct(long[] sorted, double p) {
        return sorted.length == 0 ? 0 : sorted[(int) Math.round((sorted.length - 1) * p)] / 1000.0;
    }

    static String warm(String path, long maxSecs) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        long start = System.nanoTime();
        long quietSince = System.nanoTime();
        long last = jit.getTotalCompilationTime();
        int pass = 0;
        while (true) {
            String dir = path + "/" + pass++;
            barrier(dir + "/b8", Math.min(8, clients.size()), 10, WARM_LIMIT_MS);
            barrier(dir + "/b32", Math.min(32, clients.size()), 3, WARM_LIMIT_MS);
            multi(dir + "/m", 100);
            multirun(dir + "/m", Math.min(8, clients.size()), 200);
            long now = System.nanoTime();
            long compiled = jit.getTotalCompilationTime();
            if (compiled != last) {
                last = compiled;
                quietSince = now;
            }
            boolean quiet = now - quietSince >= 1_000_000_000L;
            if ((quiet && now - start >= 2_000_000_000L) || now - start >= maxSecs * 1_000_000_000L) {
                return String.format("WARM %.1f %d %s", (now - start) / 1e9, compiled,
                    quiet ? "quiet" : "busy");
            }
        }
    }

    static String barrier(String path, int n, int rounds, long limitMs) throws Exception {
        // Every participant's start and end of each round, on one clock.
        long[][] starts = new long[rounds][n];
        long[][] ends = new long[rounds][n];
        CyclicBarrier go = new CyclicBarrier(n + 1);
        CyclicBarrier done = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final int me = i;
            CuratorFramework c = clients.get(i);
            Thread t = new Thread(() -> {
                try {
                    for (int r = 0; r < rounds; r++) {
                        DistributedDoubleBarrier b = new DistributedDoubleBarrier(c, path + "/r" + r, n);
                        go.await();
                        starts[r][me] = System.nanoTime();
                        if (!b.enter(limitMs, TimeUnit.MILLISECONDS)) throw new IllegalStateException("enter timed out");
                        if (!b.leave(limitMs, TimeUnit.MILLISECONDS)) throw new IllegalStateException("leave timed out");
                        ends[r][me] = System.nanoTime();
                        done.await();
                    }
                } catch (Exception e) {
                    // The coordinator sees the round not done, and ends the block.
                    go.reset();
                    done.reset();
                }
            });
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }
        long[] took = new long[rounds];
        int completed = 0;
        long cpu0 = cpuNanos();
        try {
            for (int r = 0; r < rounds; r++) {
                go.await(2 * limitMs, TimeUnit.MILLISECONDS);
                done.await(2 * limitMs, TimeUnit.MILLISECONDS);
                took[r] = Arrays.stream(ends[r]).max().getAsLong() - Arrays.stream(starts[r]).min().getAsLong();
                completed++;
            }
        } catch (Exception e) {
            go.reset();
            done.reset();
            for (Thread t : threads) t.interrupt();
        }
        long cpu = cpuNanos() - cpu0;
        for (Thread t : threads) t.join(5000);
        long[] each = Arrays.copyOf(took, completed);
        StringBuilder list = new StringBuilder();
        for (long t : each) list.append(String.format(" %.1f", t / 1000.0));
        Arrays.sort(each);
        return String.format("RESULT %d %.1f %.1f %d %d", completed, pct(each, 0.5), pct(each, 0.99),
            cpu / Math.max(1, completed), completed < rounds ? 1 : 0) + list;
    }

    static InterProcessMultiLock multiLock(CuratorFramework c, String path) {
        List<InterProcessLock> locks = new ArrayList<>();
        for (int i = 0; i < 4; i++) locks.add(new InterProcessMutex(c, path + "/l" + i));
        return new InterProcessMultiLock(locks);
    }

    static String multi(String path, int rounds) throws Exception {
        InterProcessMultiLock lock = multiLock(clients.get(0), path);
        long[] acquire = new long[rounds];
        long[] release = new long[rounds];
        long cpu0 = cpuNanos();
        for (int i = 0; i < rounds; i++) {
            long s = System.nanoTime();
            lock.acquire();
            long held = System.nanoTime();
            lock.release();
            acquire[i] = held - s;
            release[i] = System.nanoTime() - held;
        }
        long cpu = cpuNanos() - cpu0;
        Arrays.sort(acquire);
        Arrays.sort(release);
        return String.format("RESULT %d %.1f %.1f %.1f %.1f %d", rounds, pct(acquire, 0.5),
            pct(acquire, 0.99), pct(release, 0.5), pct(release, 0.99), cpu / rounds);
    }

    static String multirun(String path, int n, long millis) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong acquisitions = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            InterProcessMultiLock lock = multiLock(clients.get(i), path);
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    while (!stop.get()) {
                        lock.acquire();
                        acquisitions.incrementAndGet();
                        lock.release();
                    }
                } catch (Exception e) {
                    failed.compareAndSet(null, e);
                }
            });
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }
        start.await();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        // The sleep is the measurement window, not a synchronisation.
        Thread.sleep(millis);
        stop.set(true);
        long counted = acquisitions.get();
        double secs = (System.nanoTime() - t0) / 1e9;
        for (Thread t : threads) t.join();
        long cpu = cpuNanos() - cpu0;
        if (failed.get() != null) throw failed.get();
        return String.format("RESULT %d %.2f %d", counted, counted / secs,
            cpu / Math.max(1, acquisitions.get()));
    }
}
