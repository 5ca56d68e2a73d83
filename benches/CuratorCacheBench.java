// Drives Apache Curator 5.4's CuratorCache for the cache bench (benches/cache.rs): a long-lived
// JVM that takes commands on standard input, warmed once and then measured turn by turn with
// our cache, on the same server and the same tree in the same run. One line per command;
// every answer is one line.
//
//   clients N              open N clients (each its own session): OK
//   warm PATH MAXSECS      builds, changes and closes caches of the (small) tree at PATH until
//                          the JIT has been quiet for a second (at least 2 s, at most MAXSECS):
//                          WARM <seconds> <compile ms> <quiet|busy>
//   build PATH             a CuratorCache of PATH on client 0, started and waited for until
//                          initialized, and kept open:
//                          RESULT <nodes> <seconds> <heap bytes per node> <cpu ns per node>
//                          (heap: used after a full collection, before and after)
//   latency PATH N K       on the open cache: K times, client 1 sets the data of a node under
//                          PATH (PATH/d<i>/n<j>, N per directory) and waits until the cache's
//                          listener hears it: RESULT <K> <p50 µs> <p99 µs> <mean µs>
//   close                  closes the open cache: OK
//   quit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorCacheBench {
    static final List<CuratorFramework> clients = new ArrayList<>();
    static String connect;
    static CuratorCache open;
    static final LinkedBlockingQueue<String> heard = new LinkedBlockingQueue<>();

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
                        case "build": answer = build(w[1]); break;
                        case "latency":
                            answer = latency(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]));
                            break;
                        case "close": close(); answer = "OK"; break;
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
            close();
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

    static long heapAfterGc() {
        for (int i = 0; i < 3; i++) System.gc();
        return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
    }

    static String warm(String path, long maxSecs) throws Exception {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        long start = System.nanoTime();
        long quietSince = System.nanoTime();
        long last = jit.getTotalCompilationTime();
        while (true) {
            build(path);
            latency(path, 10, 50);
            close();
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

    static String build(String path) throws Exception {
        close();
        long heap0 = heapAfterGc();
        CountDownLatch initialized = new CountDownLatch(1);
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        CuratorCache cache = CuratorCache.build(clients.get(0), path);
        cache.listenable().addListener(CuratorCacheListener.builder()
            .forInitialized(initialized::countDown)
            .forChanges((before, after) -> {
                byte[] d = after.getData();
                if (d != null && d.length > 0 && d[0] == 't') heard.offer(new String(d));
            })
            .build());
        cache.start();
        open = cache;
        if (!initialized.await(600, TimeUnit.SECONDS)) return "ERROR not initialized in 600 s";
        double secs = (System.nanoTime() - t0) / 1e9;
        long cpu = cpuNanos() - cpu0;
        long nodes = cache.size();
        long heap = heapAfterGc() - heap0;
        return String.format("RESULT %d %.3f %d %d", nodes, secs, nodes == 0 ? 0 : heap / nodes,
            nodes == 0 ? 0 : cpu / nodes);
    }

    static String latency(String path, int perDir, int k) throws Exception {
        if (open == null) return "ERROR no cache open";
        CuratorFramework writer = clients.get(1);
        Random rng = new Random(k);
        long[] took = new long[k];
        int dirs = Math.max(1, writer.getChildren().forPath(path).size());
        for (int i = 0; i < k; i++) {
            String node = path + "/d" + rng.nextInt(dirs) + "/n" + rng.nextInt(perDir);
            heard.clear();
            String value = "t" + System.nanoTime() + "-" + i;
            long t0 = System.nanoTime();
            writer.setData().forPath(node, value.getBytes());
            while (true) {
                String got = heard.poll(30, TimeUnit.SECONDS);
                if (got == null) return "ERROR a change was not heard in 30 s";
                if (got.equals(value)) break;
            }
            took[i] = System.nanoTime() - t0;
        }
        Arrays.sort(took);
        long sum = 0;
        for (long t : took) sum += t;
        return String.format("RESULT %d %.1f %.1f %.1f", k, took[k / 2] / 1e3,
            took[Math.min(k - 1, k * 99 / 100)] / 1e3, sum / (double) k / 1e3);
    }

    static void close() {
        if (open != null) {
            open.close();
            open = null;
        }
    }
}
