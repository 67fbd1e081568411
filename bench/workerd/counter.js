// The counter of examples/counter as a Durable Object: one object per name,
// its value in the object's own SQLite database (ctx.storage.sql). GET
// answers the value, POST adds one and answers the new value, whatever
// follows the name in the path, as the Go and C counters do.
import { DurableObject } from "cloudflare:workers";

export class Counter extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    // The guests' on-init: the first request to a new object creates its table.
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)");
  }

  fetch(request) {
    const sql = this.ctx.storage.sql;
    if (request.method === "POST") {
      sql.exec("INSERT INTO counter VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET value = value + 1");
    } else if (request.method !== "GET") {
      return new Response("method not allowed\n", { status: 405, headers: { Allow: "GET, POST" } });
    }
    const { n } = sql.exec("SELECT ifnull(max(value), 0) AS n FROM counter").one();
    return new Response(n + "\n", { headers: { "Content-Type": "text/plain; charset=utf-8" } });
  }
}

// The front: /actor/counter/<name>[/...] goes to the object named <name>.
export default {
  fetch(request, env) {
    const m = /^\/actor\/counter\/([^/]+)/.exec(new URL(request.url).pathname);
    if (m === null) {
      return new Response("not found: want /actor/counter/<name>\n", { status: 404 });
    }
    const ns = env.COUNTER;
    return ns.get(ns.idFromName(decodeURIComponent(m[1]))).fetch(request);
  },
};
