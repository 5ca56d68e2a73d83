// Holds an Apache Curator lock on a path for the interop tests, printing what it does with
// wall-clock microseconds (the same clock the Rust side reads), one line each:
//   READY            connected
//   QUEUED           about to ask for the lock (round 1 only)
//   ACQ <micros>     holds it
//   REL <micros>     about to release it
// Usage: CuratorLockDriver <connect> <path> <mutex|semaphore|read|write|multi> <rounds> <holdMs>
// (multi: <path> is a comma-separated list; a Curator InterProcessMultiLock of mutexes on them)
// With holdMs < 0 it holds each round until a line arrives on standard input.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLockDriver {
    static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        String kind = args[2];
        int rounds = Integer.parseInt(args[3]);
        long holdMs = Long.parseLong(args[4]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        InterProcessLock lock;
        switch (kind) {
            case "mutex": lock = new InterProcessMutex(client, path); break;
            case "semaphore": lock = new InterProcessSemaphoreMutex(client, path); break;
            case "read": lock = new InterProcessReadWriteLock(client, path).readLock(); break;
            case "write": lock = new InterProcessReadWriteLock(client, path).writeLock(); break;
            case "multi":
                lock = new InterProcessMultiLock(client, java.util.Arrays.asList(path.split(",")));
                break;
            default: throw new IllegalArgumentException(kind);
        }
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("READY");
        System.out.flush();
        for (int round = 0; round < rounds; round++) {
            if (round == 0) {
                System.out.println("QUEUED");
                System.out.flush();
            }
            if (!lock.acquire(60, TimeUnit.SECONDS)) {
                System.out.println("TIMEOUT");
                System.exit(2);
            }
            System.out.println("ACQ " + micros());
            System.out.flush();
            if (holdMs < 0) {
                stdin.readLine();
            } else {
                Thread.sleep(holdMs);
            }
            System.out.println("REL " + micros());
            System.out.flush();
            lock.release();
        }
        client.close();
        System.out.println("DONE");
        System.out.flush();
    }
}
