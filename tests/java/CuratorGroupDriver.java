// A Curator GroupMember for the interop tests. Usage:
//   CuratorGroupDriver <connect> <membershipPath> <id> <payload>
// Prints READY once started; then, for each line on standard input, waits (up to 30 s) until
// its view of the group has as many members as the line says, and prints
//   MEMBERS id=payload,id=payload,...   (sorted by id)
// or TIMEOUT. An empty line closes the member and prints CLOSED.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorGroupDriver {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 10000, new ExponentialBackoffRetry(50, 10));
        client.start();
        client.blockUntilConnected();
        GroupMember member =
            new GroupMember(client, args[1], args[2], args[3].getBytes(StandardCharsets.UTF_8));
        member.start();
        System.out.println("READY");
        System.out.flush();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = stdin.readLine()) != null) {
            if (line.isEmpty()) {
                member.close();
                System.out.println("CLOSED");
                System.out.flush();
                continue;
            }
            int want = Integer.parseInt(line.trim());
            long until = System.currentTimeMillis() + 30000;
            Map<String, byte[]> members = member.getCurrentMembers();
            while (members.size() != want && System.currentTimeMillis() < until) {
                Thread.sleep(20);
                members = member.getCurrentMembers();
            }
            if (members.size() != want) {
                System.out.println("TIMEOUT");
            } else {
                StringBuilder out = new StringBuilder("MEMBERS ");
                String sep = "";
                for (Map.Entry<String, byte[]> e : new TreeMap<>(members).entrySet()) {
                    out.append(sep).append(e.getKey()).append('=')
                        .append(new String(e.getValue(), StandardCharsets.UTF_8));
                    sep = ",";
                }
                System.out.println(out);
            }
            System.out.flush();
        }
        client.close();
    }
}
