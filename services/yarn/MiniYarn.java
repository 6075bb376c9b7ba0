// A YARN cluster for tests and demos: one ResourceManager and one NodeManager in this JVM,
// from Hadoop's own MiniYARNCluster. Run as a single-file program (java ... MiniYarn.java),
// so no build step is needed.
//
// Why not Hadoop's MiniHadoopClusterManager: it also starts MapReduce's JobHistoryServer and
// ShuffleHandler, which Spark never uses, and both listen on every interface (the shuffle
// port has no bind-address setting). Everything here listens on 127.0.0.1 only.
//
// Usage: java -cp 'lib/*' MiniYarn.java <yarn-site.xml to write> [key=value ...]

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class MiniYarn {
    private MiniYarn() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: MiniYarn <yarn-site.xml to write> [key=value ...]");
            System.exit(2);
        }
        YarnConfiguration conf = new YarnConfiguration();
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv.length != 2) {
                System.err.println("not key=value: " + args[i]);
                System.exit(2);
            }
            conf.set(kv[0], kv[1]);
        }
        // The ports given above, not random ones: spark-submit must find the ResourceManager.
        conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);

        MiniYARNCluster cluster = new MiniYARNCluster("leakproof", 1, 1, 1);
        cluster.init(conf);
        cluster.start();
        if (!cluster.waitForNodeManagersToConnect(60_000)) {
            System.err.println("the NodeManager did not register with the ResourceManager");
            System.exit(1);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop));

        // Written last and renamed into place: its presence means "ready" to the scripts.
        File target = new File(args[0]);
        File partial = new File(args[0] + ".partial");
        try (OutputStream out = new FileOutputStream(partial)) {
            cluster.getConfig().writeXml(out);
        }
        Files.move(partial.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE);
        System.out.println("MiniYarn ready: " + conf.get(YarnConfiguration.RM_ADDRESS)
                + ", configuration in " + target);
        Thread.currentThread().join();
    }
}
