// Drives Apache Curator 5.4 for the shared-state bench (benches/shared.rs): a long-lived JVM
// that takes commands on standard input, warmed once and then measured turn by turn with our
// recipes, on the same server in the same run. One line per command; every answer is one line.
//
//   clients N              open N clients (each its own session): OK
//   warm PATH MAXSECS      run the loop below at 1 and 8 contenders until the JIT has been
//                          quiet for a second (and at least 2 s; at most MAXSECS):
//                          WARM <seconds> <compile ms> <quiet|busy>
//   incr PATH N MILLIS     N contenders (clients 0..N-1, a thread each), each its own
//                          DistributedAtomicLong at PATH (optimistic tries, retried at once up
//                          to 1000 times), incrementing for MILLIS:
//                          RESULT <made> <made per second> <not made> <cpu ns per made>
//   quit
//
// The loop is the Rust side's own (benches/shared.rs), step for step.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;

public class CuratorSharedBench {
    static final List<CuratorFramework> clients = new ArrayList<>();
    static String connect;

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
                        case "incr":
                            answer = incr(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]));
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

    static String warm(String path, long maxSecs) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        long start = System.nanoTime();
        long quietSince = System.nanoTime();
        long last = jit.getTotalCompilationTime();
        int pass = 0;
        while (true) {
            String dir = path + "/" + pass++;
            incr(dir + "/c1", 1, 200);
            incr(dir + "/c8", Math.min(8, clients.size()), 200);
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

    static String incr(String path, int n, long millis) throws Exception {
        AtomicLong made = new AtomicLong();
        AtomicLong missed = new AtomicLong();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        final long[] until = new long[1];
        for (int i = 0; i < n; i++) {
            DistributedAtomicLong counter =
                new DistributedAtomicLong(clients.get(i), path, new RetryNTimes(1000, 0));
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    while (System.nanoTime() < until[0]) {
                        AtomicValue<Long> v = counter.increment();
                        if (v.succeeded()) made.incrementAndGet(); else missed.incrementAndGet();
                    }
                } catch (Exception e) {
                    missed.incrementAndGet();
                }
            });
            t.start();
            threads.add(t);
        }
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        until[0] = t0 + millis * 1_000_000L;
        start.await();
        for (Thread t : threads) t.join();
        double secs = (System.nanoTime() - t0) / 1e9;
        long cpu = cpuNanos() - cpu0;
        long m = made.get();
        return String.format("RESULT %d %.1f %d %d", m, m / secs, missed.get(), m == 0 ? 0 : cpu / m);
    }
}
