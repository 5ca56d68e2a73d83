// Java's own ZooKeeper client against a SASL server (tests/sasl.rs): connects with the JAAS
// `Client` section named by -Djava.security.auth.login.config, and prints one line: OK once a
// read succeeds, AUTH_FAILED if the server refused the credentials, or ERROR <why>.
//
//   java -cp ... SaslProbe CONNECT_STRING
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

public class SaslProbe {
    public static void main(String[] args) throws Exception {
        CountDownLatch settled = new CountDownLatch(1);
        String[] state = {"ERROR no answer in 20 s"};
        ZooKeeper zk = new ZooKeeper(args[0], 10000, event -> {
            if (event.getState() == Watcher.Event.KeeperState.AuthFailed) {
                state[0] = "AUTH_FAILED";
                settled.countDown();
            } else if (event.getState() == Watcher.Event.KeeperState.SaslAuthenticated) {
                state[0] = "OK";
                settled.countDown();
            }
        });
        try {
            settled.await(20, TimeUnit.SECONDS);
            if (state[0].equals("OK")) {
                zk.exists("/", false);
            }
        } catch (Exception e) {
            state[0] = "ERROR " + e;
        } finally {
            zk.close();
        }
        System.out.println(state[0]);
        System.exit(0);
    }
}
