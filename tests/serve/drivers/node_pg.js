// node-postgres (`pg` from npm, pinned by scripts/test.sh) against `evalsql serve`, driven by
// tests/serve_drivers.rs.
//
// Usage: node node_pg.js PHASE, with NODE_PATH at the installed node_modules and the connection
// in PGHOST / PGPORT / PGUSER / PGPASSWORD. PHASE "main": queries, parameters, arrays, records;
// "cancel": the `statement_timeout` connection option on a long query, and node-postgres's
// own cancel (`new Client(config).cancel(client, query)`: a CancelRequest on a connection of
// its own, whose close must not be a reset: an unhandled ECONNRESET ends the process). Prints
// one JSON object:
// check -> {"ok": true, "value": ...} or {"ok": false, "error": "SQLSTATE: message"}.

const { Client } = require("pg");

const LONG_QUERY = "SELECT count(*) FROM generate_series(1, 5000000000)";
const QUERY = "SELECT id, model, response FROM qa ORDER BY id, model LIMIT 5";
const out = {};

function client(extra) {
  return new Client({ database: "evals", connectionTimeoutMillis: 20000, ...extra });
}

function plain(v) {
  if (v instanceof Date) return v.toISOString();
  if (Array.isArray(v)) return v.map(plain);
  return v;
}

async function check(name, fn) {
  try {
    out[name] = { ok: true, value: plain(await fn()) };
  } catch (e) {
    out[name] = { ok: false, error: `${e.code || e.name}: ${e.message}` };
  }
}

async function rows(c, text, values) {
  const r = await c.query({ text, values, rowMode: "array" });
  return r.rows;
}

async function main() {
  const phase = process.argv[2];
  if (phase === "main") {
    const c = client();
    await check("node_pg.connect", async () => (await c.connect(), (await rows(c, "SELECT 'ok'"))[0][0]));
    await check("node_pg.query", () => rows(c, QUERY));
    await check("node_pg.parameterized", async () => {
      const counts = [];
      for (const m of ["gpt-4o", "no such model", "gpt-4o"]) {
        counts.push((await rows(c, "SELECT count(*) FROM qa WHERE model = $1", [m]))[0][0]);
      }
      return counts;
    });
    await check("node_pg.prepared", async () => {
      const r = await c.query({ name: "by_model", text: "SELECT count(*) FROM qa WHERE model = $1",
        values: ["gpt-4o"], rowMode: "array" });
      const again = await c.query({ name: "by_model", text: "SELECT count(*) FROM qa WHERE model = $1",
        values: ["no such model"], rowMode: "array" });
      return [r.rows[0][0], again.rows[0][0]];
    });
    await check("node_pg.list", () => rows(c, "SELECT tags FROM typed ORDER BY id"));
    await check("node_pg.struct", () => rows(c, "SELECT judge, metrics FROM typed ORDER BY id"));
    await check("node_pg.types", () => rows(c, "SELECT id, at, amount, ok, note FROM typed ORDER BY id"));
    await check("node_pg.error_recovery", async () => {
      let state = null;
      try {
        await rows(c, "SELECT * FROM no_such_table");
      } catch (e) {
        state = e.code;
      }
      return [state, (await rows(c, "SELECT 'ok'"))[0][0]];
    });
    await c.end();
  } else {
    const c = client({ statement_timeout: 1000 });
    await check("node_pg.statement_timeout", async () => {
      await c.connect();
      const giveUp = setTimeout(() => {
        out["node_pg.statement_timeout"] = { ok: false, error: "the long query was still running after 10 s" };
        console.log(JSON.stringify(out));
        process.exit(0);
      }, 10000);
      const start = Date.now();
      let state = null;
      try {
        await c.query(LONG_QUERY);
      } catch (e) {
        state = e.code || e.name;
      }
      const seconds = (Date.now() - start) / 1000;
      clearTimeout(giveUp);
      return { sqlstate: state, seconds, then_select_1: (await rows(c, "SELECT 'ok'"))[0][0] };
    });
    await c.end().catch(() => {});

    const c2 = client();
    await check("node_pg.cancel", async () => {
      await c2.connect();
      const start = Date.now();
      const running = c2.query(LONG_QUERY);
      const canceller = setTimeout(() => client().cancel(c2, c2.activeQuery), 1000);
      const giveUp = setTimeout(() => {
        out["node_pg.cancel"] = { ok: false, error: "the long query was still running after 10 s" };
        console.log(JSON.stringify(out));
        process.exit(0);
      }, 10000);
      let state = null;
      try {
        await running;
      } catch (e) {
        state = e.code || e.name;
      }
      clearTimeout(canceller);
      clearTimeout(giveUp);
      const seconds = (Date.now() - start) / 1000;
      // The cancel connection's close arrives after the answer: give it a moment to come,
      // so that a reset would end this process before it prints.
      await new Promise((done) => setTimeout(done, 500));
      return { sqlstate: state, seconds, then_select_1: (await rows(c2, "SELECT 'ok'"))[0][0] };
    });
    await c2.end().catch(() => {});
  }
  console.log(JSON.stringify(out));
}

main();
