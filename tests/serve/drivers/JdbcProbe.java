// pgJDBC (Debian's libpostgresql-jdbc-java: DBeaver, Metabase, Tableau use this driver) against
// `evalsql serve`, driven by tests/serve_drivers.rs, which compiles it with javac.
//
// Usage: java -cp DIR:postgresql.jar JdbcProbe PHASE, with the connection in PGHOST / PGPORT /
// PGUSER / PGPASSWORD.
// PHASE "main": connect, DatabaseMetaData, queries, types; "cancel": Statement.cancel and
// setQueryTimeout on a long query. Prints one JSON object: check -> {"ok": true, "value": ...}
// or {"ok": false, "error": "SQLSTATE: message"}.

import java.math.BigDecimal;
import java.sql.Array;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

public class JdbcProbe {
    static final String LONG_QUERY = "SELECT count(*) FROM generate_series(1, 5000000000)";

    interface Check {
        Object run(Connection conn) throws Exception;
    }

    static String host, port, user, password;
    static final Map<String, String> out = new LinkedHashMap<>();

    static Connection connect() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("password", password);
        p.setProperty("connectTimeout", "20");
        return DriverManager.getConnection("jdbc:postgresql://" + host + ":" + port + "/evals", p);
    }

    static void check(Connection conn, String name, Check check) {
        try {
            out.put(name, "{\"ok\":true,\"value\":" + json(check.run(conn)) + "}");
        } catch (SQLException e) {
            out.put(name, failure(e.getSQLState() + ": " + e.getMessage()));
        } catch (Exception e) {
            out.put(name, failure(e.getClass().getSimpleName() + ": " + e.getMessage()));
        }
    }

    static String failure(String message) {
        return "{\"ok\":false,\"error\":" + json(message) + "}";
    }

    static List<Object> column(ResultSet rs, String... names) throws SQLException {
        List<Object> rows = new ArrayList<>();
        while (rs.next()) {
            if (names.length == 1) {
                rows.add(rs.getObject(names[0]));
            } else {
                List<Object> row = new ArrayList<>();
                for (String n : names) row.add(rs.getObject(n));
                rows.add(row);
            }
        }
        rs.close();
        return rows;
    }

    static List<Object> rows(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            int n = rs.getMetaData().getColumnCount();
            List<Object> rows = new ArrayList<>();
            while (rs.next()) {
                List<Object> row = new ArrayList<>();
                for (int i = 1; i <= n; i++) row.add(rs.getObject(i));
                rows.add(row);
            }
            return rows;
        }
    }

    /** The elements of each row's array in column 1, each element as its Java value. */
    static List<Object> arrays(Connection conn, String sql) throws SQLException {
        List<Object> rows = new ArrayList<>();
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            while (rs.next()) {
                Array a = rs.getArray(1);
                if (a == null) {
                    rows.add(null);
                    continue;
                }
                List<Object> items = new ArrayList<>();
                for (Object o : (Object[]) a.getArray()) items.add(o == null ? null : o.toString());
                rows.add(items);
            }
        }
        return rows;
    }

    /** Runs the long query, stopped by Statement.cancel after 1 s or by a 1 s query timeout. */
    static Object stopped(Connection conn, boolean byCancel) throws Exception {
        Statement st = conn.createStatement();
        if (!byCancel) st.setQueryTimeout(1);
        Thread canceller = new Thread(() -> {
            try {
                Thread.sleep(1000);
                if (byCancel) st.cancel();
            } catch (Exception e) {
                // reported by the query's own outcome
            }
        });
        // Whatever the server does, the probe gives up after 10 s: the connection is closed,
        // which ends the query with a connection error.
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(10000);
                conn.abort(Runnable::run);
            } catch (Exception e) {
                // nothing more to do
            }
        });
        watchdog.setDaemon(true);
        canceller.start();
        watchdog.start();
        long start = System.nanoTime();
        String state = null;
        try {
            st.executeQuery(LONG_QUERY).close();
        } catch (SQLException e) {
            state = e.getSQLState();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        watchdog.interrupt();
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("sqlstate", state);
        v.put("seconds", seconds);
        Object after;
        try {
            after = rows(conn, "SELECT 1").get(0);
        } catch (SQLException e) {
            after = "error " + e.getSQLState();
        }
        v.put("then_select_1", after);
        return v;
    }

    public static void main(String[] args) throws Exception {
        String phase = args[0];
        host = System.getenv("PGHOST");
        port = System.getenv("PGPORT");
        user = System.getenv("PGUSER");
        password = System.getenv("PGPASSWORD");
        Connection conn;
        try {
            conn = connect();
        } catch (SQLException e) {
            out.put("jdbc.connect", failure(e.getSQLState() + ": " + e.getMessage()));
            print();
            return;
        }
        if (phase.equals("main")) {
            main(conn);
        } else {
            check(null, "jdbc.cancel", c -> stopped(connect(), true));
            check(null, "jdbc.query_timeout", c -> stopped(connect(), false));
        }
        conn.close();
        print();
    }

    static void main(Connection conn) {
        check(conn, "jdbc.connect", c -> {
            DatabaseMetaData md = c.getMetaData();
            Map<String, Object> v = new LinkedHashMap<>();
            v.put("product", md.getDatabaseProductName());
            v.put("major", md.getDatabaseMajorVersion());
            return v;
        });
        check(conn, "jdbc.getSchemas", c -> column(c.getMetaData().getSchemas(), "TABLE_SCHEM"));
        check(conn, "jdbc.getTables", c -> column(
            c.getMetaData().getTables(null, "public", "%", new String[] {"TABLE", "VIEW"}),
            "TABLE_NAME", "TABLE_TYPE"));
        for (String table : new String[] {"qa", "typed"}) {
            check(conn, "jdbc.getColumns." + table, c -> column(
                c.getMetaData().getColumns(null, "public", table, "%"),
                "COLUMN_NAME", "TYPE_NAME", "DATA_TYPE"));
        }
        check(conn, "jdbc.getTypeInfo", c -> column(c.getMetaData().getTypeInfo(), "TYPE_NAME"));
        check(conn, "jdbc.getPrimaryKeys", c -> column(
            c.getMetaData().getPrimaryKeys(null, "public", "qa"), "COLUMN_NAME"));
        check(conn, "jdbc.query",
            c -> rows(c, "SELECT id, model, response FROM qa ORDER BY id, model LIMIT 5"));
        check(conn, "jdbc.prepared", c -> {
            List<Object> counts = new ArrayList<>();
            // Six executions: pgJDBC switches to a named server-side statement at the fifth.
            try (PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM qa WHERE model = ?")) {
                for (int i = 0; i < 6; i++) {
                    ps.setString(1, i % 2 == 0 ? "gpt-4o" : "no such model");
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        counts.add(rs.getLong(1));
                    }
                }
            }
            return counts;
        });
        check(conn, "jdbc.struct", c -> {
            List<Object> v = new ArrayList<>();
            try (Statement st = c.createStatement();
                 ResultSet rs = st.executeQuery("SELECT judge FROM typed ORDER BY id")) {
                while (rs.next()) v.add(rs.getString(1));
            }
            return v;
        });
        check(conn, "jdbc.list", c -> arrays(c, "SELECT tags FROM typed ORDER BY id"));
        check(conn, "jdbc.list_of_structs", c -> arrays(c, "SELECT metrics FROM typed ORDER BY id"));
        check(conn, "jdbc.types", c -> {
            List<Object> v = new ArrayList<>();
            try (Statement st = c.createStatement();
                 ResultSet rs = st.executeQuery("SELECT id, at, amount, ok, note FROM typed ORDER BY id")) {
                while (rs.next()) {
                    List<Object> row = new ArrayList<>();
                    row.add(rs.getLong(1));
                    OffsetDateTime at = rs.getObject(2, OffsetDateTime.class);
                    row.add(at == null ? null : at.toString());
                    BigDecimal amount = rs.getBigDecimal(3);
                    row.add(amount == null ? null : amount.toPlainString());
                    row.add(rs.getObject(4));
                    row.add(rs.getString(5));
                    v.add(row);
                }
            }
            return v;
        });
        check(conn, "jdbc.error_recovery", c -> {
            List<Object> v = new ArrayList<>();
            try (Statement st = c.createStatement()) {
                st.executeQuery("SELECT * FROM no_such_table").close();
                v.add(null);
            } catch (SQLException e) {
                v.add(e.getSQLState());
            }
            v.add(rows(c, "SELECT 1 AS one").get(0));
            return v;
        });
    }

    static void print() {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, String> e : out.entrySet()) {
            if (sb.length() > 1) sb.append(',');
            sb.append(json(e.getKey())).append(':').append(e.getValue());
        }
        System.out.println(sb.append('}'));
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Boolean) return o.toString();
        if (o instanceof Integer || o instanceof Long || o instanceof Short) return o.toString();
        if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            return Double.isFinite(d) ? Double.toString(d) : json(Double.toString(d));
        }
        if (o instanceof List) {
            StringBuilder sb = new StringBuilder("[");
            for (Object x : (List<?>) o) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(x));
            }
            return sb.append(']').toString();
        }
        if (o instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(e.getKey().toString())).append(':').append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        String s = o.toString();
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                    else sb.append(ch);
            }
        }
        return sb.append('"').toString();
    }
}
