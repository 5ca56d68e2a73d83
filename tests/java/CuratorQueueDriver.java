// Curator's DistributedQueue for the interop tests. Usage:
//   CuratorQueueDriver <connect> <queuePath> <lockPath> producer|consumer
// Prints READY once started. A producer then reads lines on standard input:
//   put N P     N puts of the items P-0 .. P-(N-1), one node each; prints PUT
//   multi A,B   one putMulti of the items A, B, ... (one node); prints PUT
// A consumer (Curator's safe mode: locks under lockPath) prints ITEM x for each item it
// consumes, as it consumes it, until its standard input closes.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.MultiItem;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorQueueDriver {
    static final QueueSerializer<String> TEXT = new QueueSerializer<String>() {
        public byte[] serialize(String item) {
            return item.getBytes(StandardCharsets.UTF_8);
        }

        public String deserialize(byte[] bytes) {
            return new String(bytes, StandardCharsets.UTF_8);
        }
    };

    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        boolean consumer = args[3].equals("consumer");
        QueueConsumer<String> print = new QueueConsumer<String>() {
            public void consumeMessage(String item) {
                synchronized (System.out) {
                    System.out.println("ITEM " + item);
                    System.out.flush();
                }
            }

            public void stateChanged(CuratorFramework c, ConnectionState s) {}
        };
        QueueBuilder<String> builder =
            QueueBuilder.builder(client, consumer ? print : null, TEXT, args[1]);
        if (consumer) {
            builder = builder.lockPath(args[2]);
        } else {
            builder = builder.putInBackground(false);
        }
        DistributedQueue<String> queue = builder.buildQueue();
        queue.start();
        System.out.println("READY");
        System.out.flush();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = stdin.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("put")) {
                int n = Integer.parseInt(words[1]);
                for (int i = 0; i < n; i++) {
                    queue.put(words[2] + "-" + i);
                }
            } else if (words[0].equals("multi")) {
                final String[] items = words[1].split(",");
                queue.putMulti(new MultiItem<String>() {
                    int next = 0;

                    public String nextItem() {
                        return next < items.length ? items[next++] : null;
                    }
                });
            }
            synchronized (System.out) {
                System.out.println("PUT");
                System.out.flush();
            }
        }
        queue.close();
        client.close();
    }
}
