// Curator writes a tree for the cache interop test. Usage:
//   CuratorTreeDriver <connect> <root>
// Prints READY once connected; then, for each line on standard input:
//   grow N      N nodes under root, two levels (root/a<i%10>/n<i>), each with data, parents
//               made by Curator (creatingParentsIfNeeded); prints DONE
//   churn N S   N random changes (seed S) of that tree: set a node's data, delete a leaf,
//               delete a whole branch (deletingChildrenIfNeeded), or make a node again;
//               prints DONE
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;

public class CuratorTreeDriver {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        String root = args[1];
        System.out.println("READY");
        System.out.flush();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        int made = 0;
        while ((line = stdin.readLine()) != null) {
            String[] w = line.trim().split(" ");
            int n = Integer.parseInt(w[1]);
            if (w[0].equals("grow")) {
                for (int i = 0; i < n; i++) {
                    client.create().creatingParentsIfNeeded()
                        .forPath(root + "/a" + (i % 10) + "/n" + i, ("v" + i).getBytes(StandardCharsets.UTF_8));
                }
                made = n;
            } else {
                Random rng = new Random(Long.parseLong(w[2]));
                for (int k = 0; k < n; k++) {
                    int i = rng.nextInt(Math.max(made, 1));
                    String node = root + "/a" + (i % 10) + "/n" + i;
                    try {
                        switch (rng.nextInt(4)) {
                            case 0: client.setData().forPath(node, ("w" + k).getBytes(StandardCharsets.UTF_8)); break;
                            case 1: client.delete().forPath(node); break;
                            case 2:
                                if (rng.nextInt(10) == 0) {
                                    client.delete().deletingChildrenIfNeeded().forPath(root + "/a" + (i % 10));
                                }
                                break;
                            default:
                                client.create().creatingParentsIfNeeded()
                                    .forPath(node, ("again" + k).getBytes(StandardCharsets.UTF_8));
                        }
                    } catch (KeeperException.NoNodeException | KeeperException.NodeExistsException e) {
                        // Gone or there already: the tree moved on.
                    }
                }
            }
            System.out.println("DONE");
            System.out.flush();
        }
        client.close();
    }
}
