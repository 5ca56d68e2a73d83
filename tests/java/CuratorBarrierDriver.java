// Meets the Rust side at an Apache Curator barrier for the interop tests, printing what it
// does with wall-clock microseconds (the clock the Rust side reads), one line each.
// Usage:
//   CuratorBarrierDriver <connect> double <path> <memberQty>
//     READY, ENTERING, ENTERED <micros>; then, on a line on standard input,
//     LEAVING <micros>, LEFT <micros>
//   CuratorBarrierDriver <connect> wait <path>
//     READY, WAITING, PASSED <micros>
//   CuratorBarrierDriver <connect> set|remove <path>
//     (remove: REMOVING <micros>, just before the removal), DONE
// A wait that times out (60 s) prints TIMEOUT and exits with 2.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBarrierDriver {
    static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void timedOut() {
        say("TIMEOUT");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String mode = args[1];
        String path = args[2];
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        switch (mode) {
            case "double": {
                DistributedDoubleBarrier barrier =
                    new DistributedDoubleBarrier(client, path, Integer.parseInt(args[3]));
                say("READY");
                say("ENTERING");
                if (!barrier.enter(60, TimeUnit.SECONDS)) timedOut();
                say("ENTERED " + micros());
                stdin.readLine();
                say("LEAVING " + micros());
                if (!barrier.leave(60, TimeUnit.SECONDS)) timedOut();
                say("LEFT " + micros());
                break;
            }
            case "wait": {
                DistributedBarrier barrier = new DistributedBarrier(client, path);
                say("READY");
                say("WAITING");
                if (!barrier.waitOnBarrier(60, TimeUnit.SECONDS)) timedOut();
                say("PASSED " + micros());
                break;
            }
            case "set":
                new DistributedBarrier(client, path).setBarrier();
                say("DONE");
                break;
            case "remove":
                say("REMOVING " + micros());
                new DistributedBarrier(client, path).removeBarrier();
                say("DONE");
                break;
            default:
                throw new IllegalArgumentException(mode);
        }
        client.close();
    }
}
