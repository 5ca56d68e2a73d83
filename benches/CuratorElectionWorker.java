// The election bench's Curator worker (benches/election.rs): `sessions` Curator clients, each
// a participant in one LeaderLatch per round, the way a Curator user writes it. The protocol on
// stdin/stdout is the Rust worker's:
//   `ready` once every session is connected;
//   `join PATH`: every client starts a LeaderLatch at PATH, then `joined`; a participant that
//     gains leadership prints `leader <nanoTime> <id>` from its isLeader callback, once
//     hasLeadership() says so (System.nanoTime is the machine's CLOCK_MONOTONIC on Linux, the
//     clock of the Rust side);
//   `close`: closes the latches (the victim's graceful leave), printing
//     `closed <before> <after>` around the close;
//   `leave`: closes the latches, then `left`;
//   `sid`: prints `sid 0x<session id> ...`, one per client.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.RetryNTimes;

public class CuratorElectionWorker {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessions = Integer.parseInt(args[1]);
        int sessionMs = Integer.parseInt(args[2]);
        String name = args[3];
        ExecutorService pool = Executors.newFixedThreadPool(Math.min(sessions, 64));
        List<Future<CuratorFramework>> connecting = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            connecting.add(pool.submit(() -> {
                CuratorFramework c = CuratorFrameworkFactory.builder()
                        .connectString(connect)
                        .sessionTimeoutMs(sessionMs)
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
        say("ready");
        List<LeaderLatch> latches = new ArrayList<>();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("join ")) {
                String path = line.substring(5);
                for (int i = 0; i < sessions; i++) {
                    String id = name + "-" + i;
                    LeaderLatch latch = new LeaderLatch(clients.get(i), path, id);
                    latch.addListener(new LeaderLatchListener() {
                        @Override
                        public void isLeader() {
                            long t = System.nanoTime();
                            if (latch.hasLeadership()) {
                                say("leader " + t + " " + id);
                            }
                        }

                        @Override
                        public void notLeader() {}
                    });
                    latch.start();
                    latches.add(latch);
                }
                say("joined");
            } else if (line.equals("sid")) {
                StringBuilder b = new StringBuilder("sid");
                for (CuratorFramework c : clients) {
                    b.append(" 0x").append(Long.toHexString(c.getZookeeperClient().getZooKeeper().getSessionId()));
                }
                say(b.toString());
            } else if (line.equals("close") || line.equals("leave")) {
                long before = System.nanoTime();
                for (LeaderLatch latch : latches) {
                    latch.close();
                }
                long after = System.nanoTime();
                latches.clear();
                say(line.equals("close") ? "closed " + before + " " + after : "left");
            }
        }
        for (CuratorFramework c : clients) {
            c.close();
        }
    }
}
