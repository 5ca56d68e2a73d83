// Drives Apache Curator's InterProcessMutex with the same contended loop as the Rust benches:
// n clients (each its own session), one thread each, for a fixed time; handoff latency is from
// the moment a holder calls release to the moment the next holder's acquire returns.
// Usage: CuratorBench <connect> <path> <n> <millis> <holdMs>
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int n = Integer.parseInt(args[2]);
        long millis = Long.parseLong(args[3]);
        long holdMs = Long.parseLong(args[4]);
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(
                connect, 30000, 15000, new ExponentialBackoffRetry(50, 10));
            c.start();
            c.blockUntilConnected();
            clients.add(c);
        }
        run(clients, path + "-warmup", 1000, holdMs, false); // let the JIT compile the loop
        run(clients, path, millis, holdMs, true);
        for (CuratorFramework c : clients) {
            c.close();
        }
    }

    static void run(List<CuratorFramework> clients, String path, long millis, long holdMs, boolean report)
            throws Exception {
        int n = clients.size();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong acquisitions = new AtomicLong();
        AtomicLong releasedAt = new AtomicLong();
        ConcurrentLinkedQueue<Long> handoffs = new ConcurrentLinkedQueue<>();
        CyclicBarrier start = new CyclicBarrier(n + 1);
        List<Thread> threads = new ArrayList<>();
        for (CuratorFramework c : clients) {
            InterProcessMutex mutex = new InterProcessMutex(c, path);
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    while (!stop.get()) {
                        mutex.acquire();
                        long now = System.nanoTime();
                        long r = releasedAt.getAndSet(0);
                        if (r != 0) {
                            handoffs.add(now - r);
                        }
                        acquisitions.incrementAndGet();
                        if (holdMs > 0) {
                            Thread.sleep(holdMs);
                        }
                        releasedAt.set(System.nanoTime());
                        mutex.release();
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                }
            });
            t.start();
            threads.add(t);
        }
        start.await();
        long t0 = System.nanoTime();
        Thread.sleep(millis);
        stop.set(true);
        long counted = acquisitions.get();
        double secs = (System.nanoTime() - t0) / 1e9;
        for (Thread t : threads) {
            t.join();
        }
        if (report) {
            long[] h = handoffs.stream().mapToLong(Long::longValue).sorted().toArray();
            double p50 = h.length == 0 ? 0 : h[(int) Math.round((h.length - 1) * 0.5)] / 1000.0;
            double p99 = h.length == 0 ? 0 : h[(int) Math.round((h.length - 1) * 0.99)] / 1000.0;
            System.out.printf("RESULT %d %.2f %.2f %.2f%n", counted, counted / secs, p50, p99);
        }
    }
}
