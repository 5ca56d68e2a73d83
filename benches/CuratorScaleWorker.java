// The scale bench's Curator worker (benches/scale.rs): `sessions` Curator clients, each one
// contender for one InterProcessMutex, the way a Curator user writes it. The protocol on
// stdin/stdout is the Rust worker's: `ready` once connected; `go` starts the contenders; `jit`
// is answered with `jit <ms>`, the JVM's compile time so far; `stop` ends them and prints each hold as `hold <acquired> <released>` (System.nanoTime, which on
// Linux is the machine's CLOCK_MONOTONIC, the clock of the Rust workers), then `done`.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.BufferedOutputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorScaleWorker {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int sessions = Integer.parseInt(args[2]);
        ExecutorService pool = Executors.newFixedThreadPool(Math.min(sessions, 64));
        List<Future<CuratorFramework>> connecting = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            connecting.add(pool.submit(() -> {
                CuratorFramework c = CuratorFrameworkFactory.builder()
                        .connectString(connect)
                        .sessionTimeoutMs(30000)
                        .connectionTimeoutMs(60000)
                        .retryPolicy(new RetryNTimes(3, 100))
                        .build();
                c.start();
                if (!c.blockUntilConnected(60, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("no session within 60 s");
                }
                return c;
            }));
        }
        List<CuratorFramework> clients = new ArrayList<>();
        for (Future<CuratorFramework> f : connecting) {
            clients.add(f.get());
        }
        pool.shutdown();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        if (!"go".equals(in.readLine())) {
            System.exit(2);
        }
        @SuppressWarnings("unchecked")
        List<long[]>[] holds = new List[sessions];
        Thread[] threads = new Thread[sessions];
        for (int i = 0; i < sessions; i++) {
            List<long[]> mine = new ArrayList<>();
            holds[i] = mine;
            InterProcessMutex mutex = new InterProcessMutex(clients.get(i), path);
            threads[i] = new Thread(() -> {
                while (!Thread.currentThread().isInterrupted()) {
                    try {
                        mutex.acquire();
                    } catch (Exception e) {
                        return;
                    }
                    long acquired = System.nanoTime();
                    long released = System.nanoTime();
                    try {
                        mutex.release();
                    } catch (Exception e) {
                        return;
                    }
                    synchronized (mine) {
                        mine.add(new long[] {acquired, released});
                    }
                }
            });
            threads[i].start();
        }
        // Until `stop`: `jit` asks for this JVM's compile time so far, in ms (the bench waits
        // for it to be quiet before its window).
        java.lang.management.CompilationMXBean jit =
                java.lang.management.ManagementFactory.getCompilationMXBean();
        for (String line = in.readLine(); line != null && !"stop".equals(line); line = in.readLine()) {
            if ("jit".equals(line)) {
                System.out.println("jit " + jit.getTotalCompilationTime());
                System.out.flush();
            }
        }
        for (Thread t : threads) {
            t.interrupt();
        }
        for (Thread t : threads) {
            t.join(10000);
        }
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out), false);
        for (List<long[]> mine : holds) {
            synchronized (mine) {
                for (long[] h : mine) {
                    out.println("hold " + h[0] + " " + h[1]);
                }
            }
        }
        out.println("done");
        out.flush();
        for (CuratorFramework c : clients) {
            c.close();
        }
        System.exit(0);
    }
}
