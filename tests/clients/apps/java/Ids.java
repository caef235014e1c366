// Recipe: snowflake IDs from Java with the PostgreSQL JDBC driver (Debian's
// libpostgresql-jdbc-java 42.5.5) and Jackson (libjackson2-databind-java
// 2.14), as the application role. Run as a single source file:
//
//   java -cp /usr/share/java/postgresql.jar:/usr/share/java/jackson-databind.jar:\
//     /usr/share/java/jackson-core.jar:/usr/share/java/jackson-annotations.jar Ids.java
//
// with PGHOST (a socket directory or a host), PGPORT, PGUSER, PGDATABASE.
//
// What pgjdbc 42.5.5 does, read in its source (pgjdbc REL42.5.5):
//   - prepareStatement(sql, Statement.RETURN_GENERATED_KEYS) becomes
//     prepareStatement(sql, (String[]) null) (PgConnection.java), which asks
//     for every column ({"*"}, core/QueryWithReturningColumnsKey.java), and
//     Parser.addReturning appends "RETURNING *" (core/Parser.java): the
//     generated keys are whole rows, and getLong(1) is the table's first
//     column. Naming the key column (new String[] {"id"}) asks for it alone.
//   - A batch with generated keys runs with every row's keys returned
//     (PgStatement.java, executeBatch).
//   - int8 is read into a long: every ID fits, exactly.
// Jackson reads a JSON integer too big for an int as a long (LongNode) and
// writes a long's digits: exact, in Java. A JavaScript client reading that
// JSON rounds it: the recipe writes IDs for browsers as strings.
//
// Prints what it checked and "OK java", or "FAIL java: ..." and exits 1.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;

public class Ids {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAIL java: " + what);
            System.exit(1);
        }
    }

    // The server's own text of each ID, by name.
    static Map<String, String> truth(Connection c) throws Exception {
        Map<String, String> t = new HashMap<>();
        try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT name, id::text FROM items")) {
            while (r.next()) t.put(r.getString(1), r.getString(2));
        }
        return t;
    }

    static Connection connect() throws Exception {
        String host = System.getenv().getOrDefault("PGHOST", "localhost");
        String port = System.getenv().getOrDefault("PGPORT", "5432");
        Properties p = new Properties();
        p.setProperty("user", System.getenv("PGUSER"));
        String url;
        if (host.startsWith("/")) {
            // A socket directory: pgjdbc speaks TCP only, so the test server
            // also listens on localhost.
            url = "jdbc:postgresql://localhost:" + port + "/" + System.getenv("PGDATABASE");
        } else {
            url = "jdbc:postgresql://" + host + ":" + port + "/" + System.getenv("PGDATABASE");
        }
        return DriverManager.getConnection(url, p);
    }

    public static void main(String[] args) throws Exception {
        check(org.postgresql.util.DriverInfo.DRIVER_VERSION.startsWith("42.5."),
            "pgjdbc " + org.postgresql.util.DriverInfo.DRIVER_VERSION + ", not 42.5");
        try (Connection c = connect()) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TEMP TABLE items (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), name text UNIQUE NOT NULL)");
            }
            // #region guide:jdbc
            // One row: name the key column, and read it as a long.
            long id;
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO items (name) VALUES (?)", new String[] {"id"})) {
                ps.setString(1, "first");
                ps.executeUpdate();
                try (ResultSet keys = ps.getGeneratedKeys()) {
                    keys.next();
                    id = keys.getLong("id");
                }
            }
            // A batch: every row's key comes back, in order.
            List<Long> batch = new ArrayList<>();
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO items (name) VALUES (?)", new String[] {"id"})) {
                for (int i = 0; i < 100; i++) {
                    ps.setString(1, "item " + i);
                    ps.addBatch();
                }
                ps.executeBatch();
                try (ResultSet keys = ps.getGeneratedKeys()) {
                    while (keys.next()) batch.add(keys.getLong("id"));
                }
            }
            // #endregion
            Map<String, String> t = truth(c);
            check(Long.toString(id).equals(t.get("first")), "the one row's key " + id + " is not " + t.get("first"));
            check(batch.size() == 100, "the batch returned " + batch.size() + " keys, not 100");
            for (int i = 0; i < 100; i++) {
                check(batch.get(i).toString().equals(t.get("item " + i)), "item " + i + ": key " + batch.get(i) + ", the server's " + t.get("item " + i));
            }
            check(new HashSet<>(batch).size() == 100, "the batch's keys are not distinct");
            check(id > (1L << 53) == !"js53".equals(layout(c)), "the IDs are not where the layout puts them");
            System.out.println("keys: 1 row and a batch of 100, every key the server's, as longs (pgjdbc "
                + org.postgresql.util.DriverInfo.DRIVER_VERSION + ")");

            // RETURN_GENERATED_KEYS: the whole row comes back (RETURNING *).
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TEMP TABLE tagged (label text, id bigint PRIMARY KEY DEFAULT snowflake_nextval())");
            }
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO tagged (label) VALUES ('x')", Statement.RETURN_GENERATED_KEYS)) {
                ps.executeUpdate();
                try (ResultSet keys = ps.getGeneratedKeys()) {
                    keys.next();
                    check(keys.getMetaData().getColumnCount() == 2 && "x".equals(keys.getString(1)),
                        "RETURN_GENERATED_KEYS did not return the whole row");
                }
            }
            System.out.println("RETURN_GENERATED_KEYS: the whole row, its first column not the key (name the column)");

            // An ID that arrives as text (a URL's path, a form): bound as a
            // string it is varchar, which bigint does not compare with.
            String fromUrl = Long.toString(id);
            try (PreparedStatement ps = c.prepareStatement("SELECT name FROM items WHERE id = ?")) {
                ps.setString(1, fromUrl);
                ps.executeQuery();
                check(false, "setString of an ID was accepted");
            } catch (SQLException e) {
                check("42883".equals(e.getSQLState()), "setString of an ID failed with " + e.getSQLState() + ", not 42883");
            }
            // #region guide:jdbc-text
            // An ID from a URL: parse it into a long (a NumberFormatException
            // is a bad request), and bind it as one.
            try (PreparedStatement ps = c.prepareStatement("SELECT name FROM items WHERE id = ?")) {
                ps.setLong(1, Long.parseLong(fromUrl));
                try (ResultSet r = ps.executeQuery()) {
                    check(r.next() && "first".equals(r.getString(1)), "the row of an ID from a URL was not found");
                }
            }
            // #endregion
            // An int cannot hold an ID: getInt refuses it (not a silent wrap).
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT " + id)) {
                r.next();
                r.getInt(1);
                check(!(id > Integer.MAX_VALUE), "getInt read an ID past an int");
            } catch (SQLException e) {
                check("22003".equals(e.getSQLState()), "getInt of an ID failed with " + e.getSQLState() + ", not 22003");
            }
            System.out.println("text IDs: setString refused (42883), Long.parseLong and setLong find the row; getInt refused (22003)");

            // #region guide:jdbc-json
            ObjectMapper json = new ObjectMapper();
            // JSON built by the server: Jackson reads every ID exactly, as a long.
            String agg;
            try (Statement s = c.createStatement();
                 ResultSet r = s.executeQuery("SELECT json_agg(i ORDER BY i.id) FROM items i")) {
                r.next();
                agg = r.getString(1);
            }
            Map<String, Long> read = new HashMap<>();
            for (JsonNode n : json.readTree(agg)) read.put(n.get("name").asText(), n.get("id").asLong());
            // For browsers: the ID as a string (a JavaScript Number rounds it).
            ObjectNode out = json.createObjectNode().put("id", Long.toString(id)).put("name", "first");
            // #endregion
            check(read.size() == 101, "json_agg gave " + read.size() + " rows");
            for (Map.Entry<String, Long> e : read.entrySet()) {
                check(e.getValue().toString().equals(t.get(e.getKey())), "json_agg: " + e.getKey() + " read as " + e.getValue());
            }
            String written = json.writeValueAsString(json.createObjectNode().put("id", id));
            check(written.equals("{\"id\":" + id + "}"), "Jackson wrote " + written);
            check(json.readTree(json.writeValueAsString(out)).get("id").asText().equals(t.get("first")), "the string ID changed");
            System.out.println("JSON: 101 IDs from json_agg exact as longs; written back exact, and as strings for browsers");
        }
        System.out.println("OK java");
    }

    static String layout(Connection c) throws Exception {
        try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT current_setting('snowflake_id.layout')")) {
            r.next();
            return r.getString(1);
        }
    }
}
