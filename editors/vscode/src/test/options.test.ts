/**
 * Unit tests of the extension's decisions (node's built-in runner: `node --test out/test/`).
 * The HTTP helper is exercised against a real local HTTP server (node:http on 127.0.0.1), not a fake fetch.
 */
import * as assert from "node:assert/strict";
import { createServer, IncomingMessage, Server } from "node:http";
import { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import * as o from "../options";

const cfg = (values: Record<string, unknown>) => (k: string) => values[k];

// a /v1/lint answer as `trainfix lint --json examples/ds_config.json` prints it (trimmed message)
const LINT_ANSWER = {
  diagnostics: [
    {
      range: { start: { line: 2, character: 2 }, end: { line: 2, character: 36 } },
      severity: 2,
      code: "deepspeed-comm-dtype-fp32-loss-zero",
      codeDescription: { href: "https://github.com/QwenLM/Qwen/issues/967" },
      message: "Full fine-tune loss drops to 0 ...\nFix: Delete communication_data_type ...",
      source: "trainfix",
      data: { file: "ds_config.json" },
    },
  ],
};

describe("settings → plan", () => {
  it("local mode starts `trainfix lsp` from the configured executable, for the five document languages", () => {
    const s = o.readSettings(cfg({ path: " /opt/tf/.venv/bin/trainfix ", language: "auto", serverUrl: "" }));
    const p = o.plan(s, "en-us");
    assert.equal(p.mode, "local");
    if (p.mode !== "local") return;
    assert.deepEqual(p.server, { command: "/opt/tf/.venv/bin/trainfix", args: ["lsp"] });
    assert.equal(p.client.locale, "en");
    assert.deepEqual(p.client.initializationOptions, { locale: "en", lang: "en" });
    const langs = [...new Set(p.client.documentSelector.map((f) => f.language))];
    assert.deepEqual(langs, ["json", "jsonc", "yaml", "shellscript", "python"]);
    assert.deepEqual([...new Set(p.client.documentSelector.map((f) => f.scheme))], ["file", "untitled"]);
    assert.equal(p.client.diagnosticCollectionName, "trainfix");
  });

  it("a python path runs the package's CLI module; no setting falls back to `trainfix` on PATH", () => {
    const py = o.plan(o.readSettings(cfg({ pythonPath: "/home/me/venv/bin/python" })), "en");
    assert.equal(py.mode, "local");
    if (py.mode === "local") assert.deepEqual(py.server, { command: "/home/me/venv/bin/python", args: ["-m", "app.cli", "lsp"] });
    const both = o.plan(o.readSettings(cfg({ path: "/x/trainfix", pythonPath: "/y/python" })), "en");
    if (both.mode === "local") assert.equal(both.server.command, "/x/trainfix", "the explicit executable wins");
    const none = o.plan(o.readSettings(cfg({})), "en");
    if (none.mode === "local") assert.deepEqual(none.server, { command: "trainfix", args: ["lsp"] });
  });

  it("zh: the setting, or an auto setting under a Chinese UI, gives locale zh; an unknown value is auto", () => {
    for (const [setting, ui] of [["zh", "en"], ["auto", "zh-cn"], ["auto", "zh-TW"]] as const) {
      const p = o.plan(o.readSettings(cfg({ language: setting })), ui);
      assert.equal(p.lang, "zh", `${setting} under ${ui}`);
      assert.equal(p.mode, "local");
      if (p.mode === "local") {
        assert.equal(p.client.locale, "zh", "initialize's locale, which trainfix lsp reads");
        assert.deepEqual(p.client.initializationOptions, { locale: "zh", lang: "zh" });
      }
    }
    const en = o.plan(o.readSettings(cfg({ language: "en" })), "zh-cn");
    assert.equal(en.lang, "en", "an explicit en wins over a Chinese UI");
    assert.equal(o.readSettings(cfg({ language: "fr" })).language, "auto");
  });

  it("server-URL mode starts no process and targets /v1/lint and /v1/diagnose with the bearer token", () => {
    const p = o.plan(o.readSettings(cfg({ serverUrl: "http://10.0.0.5:7860/", apiToken: "s3cret", language: "zh", path: "/x/trainfix" })), "en");
    assert.equal(p.mode, "server");
    assert.ok(!("server" in p), "no executable in server mode");
    if (p.mode !== "server") return;
    assert.equal(p.lintUrl, "http://10.0.0.5:7860/v1/lint");
    assert.equal(p.diagnoseUrl, "http://10.0.0.5:7860/v1/diagnose");
    assert.equal(p.headers.Authorization, "Bearer s3cret");
    assert.equal(p.lang, "zh");
    assert.equal(p.diagnoseLang, "zh");
    const sub = o.plan(o.readSettings(cfg({ serverUrl: "https://tf.example.org/trainfix" })), "en");
    if (sub.mode === "server") {
      assert.equal(sub.lintUrl, "https://tf.example.org/trainfix/v1/lint", "a path prefix (reverse proxy) is kept");
      assert.equal(sub.headers.Authorization, undefined, "no token, no header");
      assert.equal(sub.diagnoseLang, undefined, "auto: the server answers in the question's language");
    }
  });

  it("the token falls back to TRAINFIX_API_TOKEN from the environment; a bad server URL is a clear error", () => {
    assert.equal(o.readSettings(cfg({}), { TRAINFIX_API_TOKEN: "t0k" }).apiToken, "t0k");
    assert.equal(o.readSettings(cfg({ apiToken: "set" }), { TRAINFIX_API_TOKEN: "env" }).apiToken, "set");
    assert.throws(() => o.plan(o.readSettings(cfg({ serverUrl: "ftp://10.0.0.5:7860" })), "en"), /http:\/\/ or https:\/\//);
    assert.throws(() => o.plan(o.readSettings(cfg({ serverUrl: "10.0.0.5:7860" })), "en"), /not a URL/);
    assert.throws(() => o.plan(o.readSettings(cfg({ serverUrl: "not a url" })), "en"), /not a URL/);
  });
});

describe("request bodies", () => {
  it("lint sends the base name, never the full path, and skips documents over the budget", () => {
    assert.equal(o.fileNameFor("/home/me/secret-project/ds_config.json", "json"), "ds_config.json");
    assert.equal(o.fileNameFor("C:\\work\\run.sh", "shellscript"), "run.sh");
    assert.equal(o.fileNameFor(undefined, "yaml"), "untitled.yaml");
    assert.deepEqual(o.lintBody("a.yaml", "lr: 1", "zh"), { name: "a.yaml", content: "lr: 1", lang: "zh" });
    assert.equal(o.lintBody("big.json", "x".repeat(o.LIMITS.lintMaxChars + 1), "en"), null);
    assert.match(o.tooLargeDiagnostic(3_000_000, "zh").message, /文件过大/);
  });

  it("diagnose attaches the open file and sends lang only when it is set", () => {
    assert.deepEqual(o.diagnoseBody("  loss goes to 0 ", "ds_config.json", "{}", undefined), {
      question: "loss goes to 0",
      attachments: [{ name: "ds_config.json", content: "{}" }],
    });
    assert.equal(o.diagnoseBody("loss 变成 NaN", "a.yaml", "", "zh").lang, "zh");
    assert.throws(() => o.diagnoseBody("   ", "a", "", undefined), /empty/);
    assert.throws(() => o.diagnoseBody("q".repeat(o.LIMITS.questionMaxChars + 1), "a", "", undefined), /longer/);
  });
});

describe("API diagnostics → ranges", () => {
  it("maps the LSP shape: 0-based range, LSP severity 2 → vscode Warning (1), code with its source link", () => {
    const [d] = o.lintResponseToDiagnostics(LINT_ANSWER);
    assert.deepEqual(d.range, { start: { line: 2, character: 2 }, end: { line: 2, character: 36 } });
    assert.equal(d.severity, 1);
    assert.deepEqual(d.code, { value: "deepspeed-comm-dtype-fp32-loss-zero", target: "https://github.com/QwenLM/Qwen/issues/967" });
    assert.equal(d.source, "trainfix");
    assert.match(d.message, /Fix: /);
  });

  it("drops malformed entries, clamps negative or inverted ranges, keeps a code without a link as a string", () => {
    const out = o.lintResponseToDiagnostics({
      diagnostics: [
        null,
        { message: "no range" },
        { range: { start: { line: -3, character: 1.7 }, end: { line: 0, character: 0 } }, severity: 1, code: "trainfix.parse_error", message: "bad JSON" },
        { range: { start: { line: 4, character: 9 }, end: { line: 4, character: 2 } }, severity: 99, message: "x", codeDescription: { href: "javascript:alert(1)" }, code: "c" },
      ],
    });
    assert.equal(out.length, 2);
    assert.deepEqual(out[0].range, { start: { line: 0, character: 1 }, end: { line: 0, character: 1 } });
    assert.equal(out[0].severity, 0);
    assert.equal(out[0].code, "trainfix.parse_error");
    assert.deepEqual(out[1].range.end, { line: 4, character: 9 }, "an end before the start collapses to the start");
    assert.equal(out[1].severity, 1, "an unknown severity is a warning");
    assert.equal(out[1].code, "c", "only http(s) links become targets");
    assert.throws(() => o.lintResponseToDiagnostics({ detail: "x" }), /no diagnostics list/);
  });

  it("renders a /v1/diagnose answer as Markdown in its language, with fixes and numbered source links", () => {
    const md = o.diagnosisToMarkdown({
      language: "zh",
      confident: true,
      summary: "最可能的原因：通信精度被固定为 fp32",
      causes: [
        {
          case_id: "deepspeed-comm-dtype-fp32-loss-zero",
          title: "全量微调 loss 归零",
          cause: "DeepSpeed 配置把通信精度固定为 fp32。",
          fixes: ["删除 communication_data_type"],
          diffs: ['- "communication_data_type": "fp32"'],
          evidence: ["ds_config.json:3 communication_data_type = fp32"],
          citations: [{ n: 1, url: "https://github.com/QwenLM/Qwen/issues/967", title: "Qwen#967" }],
        },
      ],
    });
    assert.match(md, /## 可能的原因/);
    assert.match(md, /\*\*解决办法:\*\*\n- 删除 communication_data_type/);
    assert.match(md, /```diff\n- "communication_data_type": "fp32"\n```/);
    assert.match(md, /\[\[1\]\]\(https:\/\/github\.com\/QwenLM\/Qwen\/issues\/967\)/);
    const unsure = o.diagnosisToMarkdown({ language: "en", confident: false, related: [{ title: "Close case", cause: "c" }] });
    assert.match(unsure, /No confident match/);
    assert.match(unsure, /### 1\. Close case/);
  });

  it("takes the language server's Markdown as a string or wrapped", () => {
    assert.equal(o.commandResultToMarkdown("# a"), "# a");
    assert.equal(o.commandResultToMarkdown({ markdown: "# b" }), "# b");
    assert.throws(() => o.commandResultToMarkdown(null), /no Markdown/);
  });
});

describe("postJson against a local HTTP server", () => {
  let server: Server;
  let base = "";
  const seen: { url?: string; auth?: string; body?: unknown }[] = [];

  before(async () => {
    server = createServer((req: IncomingMessage, res) => {
      let raw = "";
      req.on("data", (c) => (raw += c));
      req.on("end", () => {
        seen.push({ url: req.url, auth: req.headers.authorization, body: JSON.parse(raw || "null") });
        if (req.url === "/v1/lint" && req.headers.authorization === "Bearer good") {
          res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(LINT_ANSWER));
        } else if (req.url === "/v1/lint") {
          res
            .writeHead(401, { "Content-Type": "application/json" })
            .end(JSON.stringify({ error: { code: "unauthorized", message: "wrong bearer token", request_id: "ab" } }));
        } else if (req.url === "/slow/v1/lint") {
          setTimeout(() => res.writeHead(200).end("{}"), 1500);
        } else {
          res.writeHead(502).end("<html>bad gateway</html>");
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  const post = (p: o.HttpPlan, timeout = 5000) =>
    o.postJson(fetch as unknown as o.FetchLike, p.lintUrl, o.lintBody("ds_config.json", "{}", p.lang), p.headers, timeout);
  const httpPlan = (extra: Record<string, unknown>) => o.plan(o.readSettings(cfg({ serverUrl: base, ...extra })), "en") as o.HttpPlan;

  it("sends the body and the token, and returns diagnostics", async () => {
    const r = await post(httpPlan({ apiToken: "good" }));
    assert.ok(r.ok);
    if (r.ok) assert.deepEqual(o.lintResponseToDiagnostics(r.json).map((d) => d.range.start), [{ line: 2, character: 2 }]);
    const last = seen[seen.length - 1];
    assert.equal(last.auth, "Bearer good");
    assert.deepEqual(last.body, { name: "ds_config.json", content: "{}", lang: "en" });
  });

  it("reports the API's error code, a non-JSON error, a timeout and an unreachable server as data", async () => {
    const bad = await post(httpPlan({ apiToken: "wrong" }));
    assert.deepEqual(bad, { ok: false, status: 401, code: "unauthorized", message: "wrong bearer token" });
    const gw = await post(httpPlan({ serverUrl: `${base}/other` }));
    assert.equal(!gw.ok && gw.code, "http_502");
    const slow = await post(httpPlan({ serverUrl: `${base}/slow` }), 300);
    assert.equal(!slow.ok && slow.code, "timeout");
    const closed = await post(o.plan(o.readSettings(cfg({ serverUrl: "http://127.0.0.1:9" })), "en") as o.HttpPlan);
    assert.equal(!closed.ok && closed.code, "unreachable");
  });
});
