// Curator's counters for the interop tests. Usage:
//   CuratorCounterDriver <connect> <longPath> <countPath>
// Prints READY once connected; then, for each line on standard input:
//   inc N    N increments of a DistributedAtomicLong at longPath (optimistic tries, then
//            a PromotedToLock mutex at longPath-lock); prints MADE v,v,... (the post values
//            of the increments that succeeded)
//   count N  N raises by one of a SharedCount at countPath (seed 0), each by trySetCount from
//            the version last seen until one succeeds; prints COUNTED v,v,...
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.atomic.PromotedToLock;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;

public class CuratorCounterDriver {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        DistributedAtomicLong counter = new DistributedAtomicLong(
            client, args[1], new RetryNTimes(3, 1),
            PromotedToLock.builder().lockPath(args[1] + "-lock")
                .retryPolicy(new RetryNTimes(50, 1)).timeout(30, TimeUnit.SECONDS).build());
        SharedCount count = new SharedCount(client, args[2], 0);
        count.start();
        System.out.println("READY");
        System.out.flush();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = stdin.readLine()) != null) {
            String[] words = line.trim().split(" ");
            int n = Integer.parseInt(words[1]);
            StringBuilder out = new StringBuilder();
            String sep = "";
            for (int i = 0; i < n; i++) {
                long made;
                if (words[0].equals("inc")) {
                    AtomicValue<Long> v = counter.increment();
                    if (!v.succeeded()) {
                        continue;
                    }
                    made = v.postValue();
                } else {
                    while (true) {
                        VersionedValue<Integer> seen = count.getVersionedValue();
                        if (count.trySetCount(seen, seen.getValue() + 1)) {
                            made = seen.getValue() + 1;
                            break;
                        }
                    }
                }
                out.append(sep).append(made);
                sep = ",";
            }
            System.out.println((words[0].equals("inc") ? "MADE " : "COUNTED ") + out);
            System.out.flush();
        }
        count.close();
        client.close();
    }
}
