// Drives Apache Curator for the peers bench: a long-lived JVM that takes commands on standard
// input, so that it is warmed once and then measured turn by turn with the Rust clients, on
// the same server in the same run. One line per command; every answer is one line.
//
//   clients N                    open N clients (each its own session)
//   warm PATH MAXSECS            run every loop until the JIT has been quiet for a second
//                                (and at least 2 s; at most MAXSECS): WARM <seconds>
//                                <compile ms> <quiet|busy>
//   uncontended PATH ROUNDS      acquire/release on one client; acquire latency:
//                                RESULT <rounds> <p50 us> <p99 us> <cpu ns per acquisition>
//   run KIND PATH N MILLIS       N contenders (mutex | semaphore | rwlock) for MILLIS:
//                                RESULT <acquisitions> <per second> <handoff p50 us>
//                                       <handoff p99 us> <cpu ns per acquisition>
//   many PATH THREADS PATHS MILLIS  THREADS threads share one client (the first) and take
//                                random locks among PATHS mutexes under PATH for MILLIS:
//                                RESULT <acquisitions> <per second> <cpu ns per acquisition>
//   quit
//
// The contended loop is the Rust benches' own: acquire, note the handoff (from the moment the
// previous holder called release), release; rwlock contenders write every tenth round.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    static final List<CuratorFramework> clients = new ArrayList<>();
    static String connect;

    public static void main(String[] args) throws Exception {
        connect = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "clients": openClients(Integer.parseInt(w[1])); System.out.println("OK"); break;
                case "warm": System.out.println(warm(w[1], Long.parseLong(w[2]))); break;
                case "uncontended": System.out.println(uncontended(w[1], Integer.parseInt(w[2]))); break;
                case "run":
                    System.out.println(run(w[1], w[2], Integer.parseInt(w[3]), Long.parseLong(w[4])));
                    break;
                case "many":
                    System.out.println(many(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]),
                        Long.parseLong(w[4])));
                    break;
                case "quit":
                    for (CuratorFramework c : clients) c.close();
                    return;
                default: System.out.println("ERROR unknown command " + w[0]);
            }
            System.out.flush();
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

    static String warm(String path, long maxSecs) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        long start = System.nanoTime();
        long quietSince = System.nanoTime();
        long last = jit.getTotalCompilationTime();
        while (true) {
            uncontended(path + "/u", 200);
            run("mutex", path + "/c", Math.min(8, clients.size()), 200);
            run("semaphore", path + "/s", Math.min(4, clients.size()), 100);
            run("rwlock", path + "/rw", Math.min(4, clients.size()), 100);
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

    static InterProcessLock lockFor(String kind, CuratorFramework c, String path, boolean write) {
        switch (kind) {
            case "mutex": return new InterProcessMutex(c, path);
            case "semaphore": return new InterProcessSemaphoreMutex(c, path);
            case "rwlock": {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                return write ? rw.writeLock() : rw.readLock();
            }
            default: throw new IllegalArgumentException(kind);
        }
    }

    static double pct(long[] sorted, double p) {
        return sorted.length == 0 ? 0 : sorted[(int) Math.round((sorted.length - 1) * p)] / 1000.0;
    }

    static String uncontended(String path, int rounds) throws Exception {
        InterProcessMutex mutex = new InterProcessMutex(clients.get(0), path);
        long[] t = new long[rounds];
        long cpu0 = cpuNanos();
        for (int i = 0; i < rounds; i++) {
            long s = System.nanoTime();
            mutex.acquire();
            t[i] = System.nanoTime() - s;
            mutex.release();
        }
        long cpu = cpuNanos() - cpu0;
        java.util.Arrays.sort(t);
        return String.format("RESULT %d %.1f %.1f %d", rounds, pct(t, 0.5), pct(t, 0.99), cpu / rounds);
    }

    static String run(String kind, String path, int n, long millis) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong acquisitions = new AtomicLong();
        AtomicLong releasedAt = new AtomicLong();
        ConcurrentLinkedQueue<Long> handoffs = new ConcurrentLinkedQueue<>();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            CuratorFramework c = clients.get(i);
            InterProcessLock read = lockFor(kind, c, path, false);
            InterProcessLock write = lockFor(kind, c, path, true);
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    long round = 0;
                    while (!stop.get()) {
                        InterProcessLock lock = (round++ % 10 == 9) ? write : read;
                        lock.acquire();
                        long now = System.nanoTime();
                        long r = releasedAt.getAndSet(0);
                        if (r != 0) handoffs.add(now - r);
                        acquisitions.incrementAndGet();
                        releasedAt.set(System.nanoTime());
                        lock.release();
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                }
            });
            t.start();
            threads.add(t);
        }
        start.await();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        Thread.sleep(millis);
        stop.set(true);
        long counted = acquisitions.get();
        double secs = (System.nanoTime() - t0) / 1e9;
        for (Thread t : threads) t.join();
        long cpu = cpuNanos() - cpu0;
        long[] h = handoffs.stream().mapToLong(Long::longValue).sorted().toArray();
        return String.format("RESULT %d %.2f %.1f %.1f %d", counted, counted / secs, pct(h, 0.5),
            pct(h, 0.99), cpu / Math.max(1, acquisitions.get()));
    }

    static String many(String path, int n, int paths, long millis) throws Exception {
        CuratorFramework c = clients.get(0);
        // One lock object per path, shared by the threads (Curator's mutex is reentrant per
        // thread, so sharing it is how one client serves many threads).
        List<InterProcessMutex> locks = new ArrayList<>();
        for (int i = 0; i < paths; i++) locks.add(new InterProcessMutex(c, path + "/p" + i));
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong acquisitions = new AtomicLong();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Thread t = new Thread(() -> {
                try {
                    java.util.concurrent.ThreadLocalRandom rng =
                        java.util.concurrent.ThreadLocalRandom.current();
                    start.await();
                    while (!stop.get()) {
                        InterProcessMutex lock = locks.get(rng.nextInt(paths));
                        lock.acquire();
                        acquisitions.incrementAndGet();
                        lock.release();
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                }
            });
            t.start();
            threads.add(t);
        }
        start.await();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        Thread.sleep(millis);
        stop.set(true);
        long counted = acquisitions.get();
        double secs = (System.nanoTime() - t0) / 1e9;
        for (Thread t : threads) t.join();
        long cpu = cpuNanos() - cpu0;
        return String.format("RESULT %d %.2f %d", counted, counted / secs,
            cpu / Math.max(1, acquisitions.get()));
    }
}
