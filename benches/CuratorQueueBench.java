// Drives Apache Curator 5.4 for the queue bench (benches/queue.rs): a long-lived JVM that
// takes commands on standard input, warmed once and then measured turn by turn with our
// recipes, on the same server in the same run. One line per command; every answer is one line.
//
//   clients N                    open N clients (each its own session): OK
//   warm PATH MAXSECS            puts then drains (safe mode) 200 items at a time until the JIT
//                                has been quiet for a second (at least 2 s, at most MAXSECS):
//                                WARM <seconds> <compile ms> <quiet|busy>
//   put PATH N MILLIS            N producers (clients 0..N-1, a thread and a DistributedQueue
//                                each, puts in the foreground) put one-item nodes for MILLIS:
//                                RESULT <made> <made per second> <failed> <cpu ns per made>
//   drain PATH LOCKS N COUNT     N consumers (clients 0..N-1, a DistributedQueue each, safe mode
//                                with lock path LOCKS) consume a queue holding COUNT items:
//                                RESULT <consumed> <consumed per second> 0 <cpu ns per one>
//   quit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorQueueBench {
    static final List<CuratorFramework> clients = new ArrayList<>();
    static String connect;
    static final byte[] ITEM = "a work item of a few dozen bytes, as a job id and its args".getBytes();
    static final QueueSerializer<byte[]> RAW = new QueueSerializer<byte[]>() {
        public byte[] serialize(byte[] item) { return item; }
        public byte[] deserialize(byte[] bytes) { return bytes; }
    };

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
                        case "put":
                            answer = put(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]));
                            break;
                        case "drain":
                            answer = drain(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]));
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
            DistributedQueue<byte[]> q = QueueBuilder.builder(clients.get(0), null, RAW, dir + "/q")
                .putInBackground(false).buildQueue();
            q.start();
            for (int i = 0; i < 200; i++) q.put(ITEM);
            q.close();
            drain(dir + "/q", dir + "/locks", 1, 200);
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

    static String put(String path, int n, long millis) throws Exception {
        AtomicLong made = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        List<DistributedQueue<byte[]>> queues = new ArrayList<>();
        final long[] until = new long[1];
        for (int i = 0; i < n; i++) {
            DistributedQueue<byte[]> q = QueueBuilder.builder(clients.get(i), null, RAW, path)
                .putInBackground(false).buildQueue();
            q.start();
            queues.add(q);
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    while (System.nanoTime() < until[0]) {
                        q.put(ITEM);
                        made.incrementAndGet();
                    }
                } catch (Exception e) {
                    failed.incrementAndGet();
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
        for (DistributedQueue<byte[]> q : queues) q.close();
        long m = made.get();
        return String.format("RESULT %d %.1f %d %d", m, m / secs, failed.get(), m == 0 ? 0 : cpu / m);
    }

    static String drain(String path, String locks, int n, int count) throws Exception {
        AtomicLong consumed = new AtomicLong();
        CountDownLatch all = new CountDownLatch(count);
        QueueConsumer<byte[]> consumer = new QueueConsumer<byte[]>() {
            public void consumeMessage(byte[] item) {
                consumed.incrementAndGet();
                all.countDown();
            }
            public void stateChanged(CuratorFramework c, ConnectionState s) {}
        };
        List<DistributedQueue<byte[]>> queues = new ArrayList<>();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            DistributedQueue<byte[]> q = QueueBuilder.builder(clients.get(i), consumer, RAW, path)
                .lockPath(locks).buildQueue();
            q.start();
            queues.add(q);
        }
        boolean done = all.await(120, TimeUnit.SECONDS);
        double secs = (System.nanoTime() - t0) / 1e9;
        long cpu = cpuNanos() - cpu0;
        for (DistributedQueue<byte[]> q : queues) q.close();
        long c = consumed.get();
        if (!done) return "ERROR drained " + c + " of " + count;
        return String.format("RESULT %d %.1f 0 %d", c, c / secs, c == 0 ? 0 : cpu / c);
    }
}
