// A Kerberos KDC for the secured stack: Apache Kerby's SimpleKdcServer in this JVM, TCP only,
// bound to 127.0.0.1. Run as a single-file program (java ... Kdc.java), so nothing is built.
//
// Why Kerby: it is a real KDC (AS and TGS exchanges, pre-authentication, ticket lifetimes,
// clock-skew checks) that starts in about a second from Maven Central jars, with no root, no
// system service and no database to create; Hadoop's own MiniKdc is a thin wrapper of it.
//
// Each principal's key is derived from a secret seed kept beside the keytabs, so a restarted
// KDC issues the same keys and the keytabs the running services hold stay valid.
//
// Usage: java -cp 'lib/*' Kdc.java <dir> <realm> <port> <seed file> <spec>...
//   <spec> is  keytab-file=principal[,principal...]   the principals, exported to that keytab
//          or  stale:keytab-file=principal            a keytab with an old key of it, after
//                                                     which the principal is deleted (and
//                                                     made again if another spec names it)
// "_HOST" in a principal becomes this JVM's canonical host name, the name Hadoop's and
// HBase's servers put in their own principals; it is written to <dir>/host.
// Once every keytab is written it writes <dir>/ready; the scripts wait for that file.

import java.io.File;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;

import org.apache.kerby.kerberos.kerb.server.KdcConfigKey;
import org.apache.kerby.kerberos.kerb.server.SimpleKdcServer;

public final class Kdc {
    private Kdc() {
    }

    private static String password(byte[] seed, String principal, String salt) throws Exception {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        sha.update(seed);
        sha.update(salt.getBytes(StandardCharsets.UTF_8));
        sha.update(principal.getBytes(StandardCharsets.UTF_8));
        return HexFormat.of().formatHex(sha.digest());
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: Kdc <dir> <realm> <port> <seed file> <spec>...");
            System.exit(2);
        }
        File dir = new File(args[0]);
        String realm = args[1];
        int port = Integer.parseInt(args[2]);
        byte[] seed = Files.readAllBytes(new File(args[3]).toPath());
        File ready = new File(dir, "ready");
        Files.deleteIfExists(ready.toPath());
        String host = InetAddress.getLocalHost().getCanonicalHostName().toLowerCase();
        Files.writeString(new File(dir, "host").toPath(), host + "\n");

        SimpleKdcServer kdc = new SimpleKdcServer();
        kdc.setWorkDir(dir);
        kdc.setKdcRealm(realm);
        kdc.setKdcHost("127.0.0.1");
        kdc.setAllowUdp(false);
        kdc.setKdcTcpPort(port);
        // Tickets are as short as the client asks (the ticket-expiry tests ask for a minute
        // or two); the default floor of an hour would refuse them.
        kdc.getKdcConfig().setLong(KdcConfigKey.MINIMUM_TICKET_LIFETIME, 10L);
        kdc.getKdcConfig().setString(KdcConfigKey.ENCRYPTION_TYPES,
            "aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96");
        kdc.init();

        Map<File, List<String>> keytabs = new LinkedHashMap<>();
        Map<File, String> stale = new LinkedHashMap<>();
        for (int i = 4; i < args.length; i++) {
            String spec = args[i];
            boolean old = spec.startsWith("stale:");
            String[] kv = (old ? spec.substring(6) : spec).replace("_HOST", host).split("=", 2);
            if (kv.length != 2) {
                System.err.println("not keytab=principal[,principal]: " + spec);
                System.exit(2);
            }
            File keytab = new File(kv[0]);
            if (old) {
                stale.put(keytab, kv[1]);
            } else {
                keytabs.put(keytab, new ArrayList<>(new LinkedHashSet<>(Arrays.asList(
                    kv[1].split(",")))));
            }
        }
        // A stale keytab: the principal's keys from an old password, exported, then replaced.
        for (Map.Entry<File, String> e : stale.entrySet()) {
            String principal = e.getValue();
            kdc.createPrincipal(principal, password(seed, principal, "old"));
            Files.deleteIfExists(e.getKey().toPath());
            kdc.getKadmin().exportKeytab(e.getKey(), List.of(principal));
            kdc.deletePrincipal(principal);
        }
        for (Map.Entry<File, List<String>> e : keytabs.entrySet()) {
            for (String principal : e.getValue()) {
                kdc.createPrincipal(principal, password(seed, principal, "current"));
            }
            File tmp = new File(e.getKey().getPath() + ".tmp");
            Files.deleteIfExists(tmp.toPath());
            kdc.getKadmin().exportKeytab(tmp, e.getValue());
            tmp.setReadable(false, false);
            tmp.setReadable(true, true);
            Files.move(tmp.toPath(), e.getKey().toPath(),
                java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        }

        kdc.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                kdc.stop();
            } catch (Exception ignored) {
                // stopping anyway
            }
        }));
        Files.writeString(ready.toPath(), realm + " on 127.0.0.1:" + port + "\n");
        System.out.println("KDC for " + realm + " listening on 127.0.0.1:" + port);
        Thread.currentThread().join();
    }
}
