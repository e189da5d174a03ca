/**
 * Everything the extension decides, as plain data: which process to start (or which server to call), the
 * language client's options, the HTTP request bodies, and the mapping from API diagnostics to ranges.
 *
 * No `vscode` import here, so `node --test` can check it without an editor (see test/options.test.ts);
 * extension.ts only turns these values into VS Code objects.
 */

/** VS Code language ids whose documents trainfix reads (the server detects the format from the content). */
export const DOCUMENT_LANGUAGES = ["json", "jsonc", "yaml", "shellscript", "python"] as const;
export const DOCUMENT_SCHEMES = ["file", "untitled"] as const;

export type LanguageSetting = "auto" | "en" | "zh";
export type Lang = "en" | "zh";

/** The extension's settings (`trainfix.*`), normalised. */
export interface Settings {
  path: string;
  pythonPath: string;
  language: LanguageSetting;
  serverUrl: string;
  apiToken: string;
}

/** Budgets: what is sent to a shared server and how long we wait for it. */
export const LIMITS = {
  /** Larger documents are not sent to /v1/lint on each change (the server's own limit is TRAINFIX_MAX_UPLOAD_MB). */
  lintMaxChars: 2_000_000,
  diagnoseMaxChars: 2_000_000,
  questionMaxChars: 10_000,
  lintTimeoutMs: 10_000,
  diagnoseTimeoutMs: 120_000,
  /** Wait this long after the last keystroke before linting over HTTP. */
  changeDebounceMs: 400,
} as const;

/** Read `trainfix.*` through `get` (VS Code's WorkspaceConfiguration.get or a plain lookup in tests). */
export function readSettings(get: (key: string) => unknown, env: Record<string, string | undefined> = {}): Settings {
  const str = (k: string): string => {
    const v = get(k);
    return typeof v === "string" ? v.trim() : "";
  };
  const lang = str("language");
  return {
    path: str("path"),
    pythonPath: str("pythonPath"),
    language: lang === "en" || lang === "zh" ? lang : "auto",
    serverUrl: str("serverUrl"),
    apiToken: str("apiToken") || (env.TRAINFIX_API_TOKEN ?? "").trim(),
  };
}

/** The answer language: the setting, or for `auto` the editor's UI language (`zh-cn`, `zh-tw` → zh). */
export function resolveLang(setting: LanguageSetting, uiLanguage: string): Lang {
  if (setting !== "auto") return setting;
  return uiLanguage.toLowerCase().startsWith("zh") ? "zh" : "en";
}

/** How to start `trainfix lsp` (the shape of vscode-languageclient's `Executable`, stdio transport). */
export interface ServerExecutable {
  command: string;
  args: string[];
}

export function serverExecutable(s: Settings): ServerExecutable {
  if (s.path) return { command: s.path, args: ["lsp"] };
  if (s.pythonPath) return { command: s.pythonPath, args: ["-m", "app.cli", "lsp"] };
  return { command: "trainfix", args: ["lsp"] };
}

export interface DocumentFilter {
  scheme: string;
  language: string;
}

export function documentSelector(): DocumentFilter[] {
  return DOCUMENT_SCHEMES.flatMap((scheme) => DOCUMENT_LANGUAGES.map((language) => ({ scheme, language })));
}

/** Whether a document is one trainfix reads (used by the HTTP mode, where no language client filters for us). */
export function isTrainfixDocument(languageId: string, scheme: string): boolean {
  return (DOCUMENT_LANGUAGES as readonly string[]).includes(languageId) && (DOCUMENT_SCHEMES as readonly string[]).includes(scheme);
}

/** The data part of vscode-languageclient's LanguageClientOptions. */
export interface ClientOptionsData {
  documentSelector: DocumentFilter[];
  /** Sent as `locale` in `initialize` (trainfix lsp takes its message language from it), instead of VS Code's UI language. */
  locale: Lang;
  initializationOptions: { locale: Lang; lang: Lang };
  diagnosticCollectionName: string;
  outputChannelName: string;
}

export interface LocalPlan {
  mode: "local";
  lang: Lang;
  server: ServerExecutable;
  client: ClientOptionsData;
}

export interface HttpPlan {
  mode: "server";
  lang: Lang;
  /** `lang` sent to /v1/diagnose; undefined for `auto`: the server answers in the question's language. */
  diagnoseLang: Lang | undefined;
  lintUrl: string;
  diagnoseUrl: string;
  headers: Record<string, string>;
  documentSelector: DocumentFilter[];
}

export class SettingsError extends Error {}

/** What to run for these settings: a local `trainfix lsp`, or the HTTP API of a shared server. */
export function plan(s: Settings, uiLanguage: string): LocalPlan | HttpPlan {
  const lang = resolveLang(s.language, uiLanguage);
  if (s.serverUrl) {
    return {
      mode: "server",
      lang,
      diagnoseLang: s.language === "auto" ? undefined : s.language,
      lintUrl: endpoint(s.serverUrl, "/v1/lint"),
      diagnoseUrl: endpoint(s.serverUrl, "/v1/diagnose"),
      headers: requestHeaders(s.apiToken),
      documentSelector: documentSelector(),
    };
  }
  return {
    mode: "local",
    lang,
    server: serverExecutable(s),
    client: {
      documentSelector: documentSelector(),
      locale: lang,
      initializationOptions: { locale: lang, lang },
      diagnosticCollectionName: "trainfix",
      outputChannelName: "trainfix",
    },
  };
}

/** `base` + `path`, refusing anything but http(s) so a typo does not send a file to an odd place. */
export function endpoint(base: string, path: string): string {
  let u: URL;
  try {
    u = new URL(base);
  } catch {
    throw new SettingsError(`trainfix.serverUrl is not a URL: ${JSON.stringify(base)} (expected e.g. http://10.0.0.5:7860)`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new SettingsError(`trainfix.serverUrl must start with http:// or https:// (got ${u.protocol})`);
  }
  const prefix = u.pathname.replace(/\/+$/, "");
  return `${u.origin}${prefix}${path}`;
}

export function requestHeaders(token: string): Record<string, string> {
  const h: Record<string, string> = { "Content-Type": "application/json", Accept: "application/json" };
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

const UNTITLED_EXT: Record<string, string> = { json: ".json", jsonc: ".json", yaml: ".yaml", shellscript: ".sh", python: ".py" };

/** The name sent with the content: the file's base name (a hint for format detection; never the full path). */
export function fileNameFor(fsPath: string | undefined, languageId: string): string {
  const base = (fsPath ?? "").split(/[\\/]/).pop() ?? "";
  const name = base || `untitled${UNTITLED_EXT[languageId] ?? ".txt"}`;
  return name.slice(-255);
}

export interface LintBody {
  name: string;
  content: string;
  lang: Lang;
}

/** The body of POST /v1/lint, or null when the document is over the budget. */
export function lintBody(name: string, content: string, lang: Lang): LintBody | null {
  if (content.length > LIMITS.lintMaxChars) return null;
  return { name, content, lang };
}

export interface DiagnoseBody {
  question: string;
  attachments: { name: string; content: string }[];
  lang?: Lang;
}

/** The body of POST /v1/diagnose: the question and the open file as an attachment. */
export function diagnoseBody(question: string, name: string, content: string, lang: Lang | undefined): DiagnoseBody {
  const q = question.trim();
  if (!q) throw new SettingsError("the question is empty");
  if (q.length > LIMITS.questionMaxChars) throw new SettingsError(`the question is longer than ${LIMITS.questionMaxChars} characters`);
  if (content.length > LIMITS.diagnoseMaxChars) {
    throw new SettingsError(`the file is larger than ${LIMITS.diagnoseMaxChars / 1_000_000} M characters; diagnose a smaller excerpt`);
  }
  const body: DiagnoseBody = { question: q, attachments: [{ name, content }] };
  if (lang) body.lang = lang;
  return body;
}

// ------------------------------------------------------------------ diagnostics as plain data

export interface Position {
  line: number;
  character: number;
}

/** A diagnostic ready for `new vscode.Diagnostic(...)`: severity is vscode.DiagnosticSeverity (0 error … 3 hint). */
export interface DiagnosticData {
  range: { start: Position; end: Position };
  severity: 0 | 1 | 2 | 3;
  message: string;
  source: string;
  code: { value: string; target?: string } | string | undefined;
}

function nat(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? Math.max(0, Math.floor(v)) : null;
}

function pos(v: unknown): Position | null {
  if (typeof v !== "object" || v === null) return null;
  const o = v as Record<string, unknown>;
  const line = nat(o.line);
  const character = nat(o.character);
  return line === null || character === null ? null : { line, character };
}

/** One LSP-shaped diagnostic from /v1/lint → DiagnosticData; null when it is not one (never throws). */
export function toDiagnosticData(d: unknown): DiagnosticData | null {
  if (typeof d !== "object" || d === null) return null;
  const o = d as Record<string, unknown>;
  const r = o.range as Record<string, unknown> | undefined;
  const start = pos(r?.start);
  let end = pos(r?.end);
  if (!start || !end || typeof o.message !== "string") return null;
  if (end.line < start.line || (end.line === start.line && end.character < start.character)) end = { ...start };
  const lsp = typeof o.severity === "number" && o.severity >= 1 && o.severity <= 4 ? Math.floor(o.severity) : 2;
  const href = (o.codeDescription as Record<string, unknown> | undefined)?.href;
  const code =
    typeof o.code === "string" || typeof o.code === "number"
      ? typeof href === "string" && /^https?:\/\//.test(href)
        ? { value: String(o.code), target: href }
        : String(o.code)
      : undefined;
  return {
    range: { start, end },
    severity: (lsp - 1) as 0 | 1 | 2 | 3,
    message: o.message,
    source: typeof o.source === "string" ? o.source : "trainfix",
    code,
  };
}

/** The body of a /v1/lint answer → the diagnostics to publish (malformed entries are dropped). */
export function lintResponseToDiagnostics(json: unknown): DiagnosticData[] {
  const list = (json as { diagnostics?: unknown } | null)?.diagnostics;
  if (!Array.isArray(list)) throw new Error("the server's /v1/lint answer has no diagnostics list");
  return list.map(toDiagnosticData).filter((x): x is DiagnosticData => x !== null);
}

/** A diagnostic for a document too large to lint over HTTP, so the user knows why nothing is underlined. */
export function tooLargeDiagnostic(chars: number, lang: Lang): DiagnosticData {
  const mb = (LIMITS.lintMaxChars / 1_000_000).toString();
  const message =
    lang === "zh"
      ? `trainfix：文件过大（${chars} 个字符，上限 ${mb}M），未通过服务器检查。`
      : `trainfix: this file is too large to lint through the server (${chars} characters, limit ${mb}M).`;
  return { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } }, severity: 2, message, source: "trainfix", code: "trainfix.too_large" };
}

// ------------------------------------------------------------------ HTTP

export type FetchLike = (url: string, init: { method: string; headers: Record<string, string>; body: string; signal?: AbortSignal }) => Promise<{
  ok: boolean;
  status: number;
  text(): Promise<string>;
}>;

export type ApiResult = { ok: true; json: unknown } | { ok: false; status: number; code: string; message: string };

/** POST a JSON body; an error (HTTP, the API's {error: {code, message}} body, network, timeout) comes back as data. */
export async function postJson(fetchFn: FetchLike, url: string, body: unknown, headers: Record<string, string>, timeoutMs: number): Promise<ApiResult> {
  let res;
  try {
    res = await fetchFn(url, { method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    const err = e as Error;
    const timedOut = err?.name === "TimeoutError" || err?.name === "AbortError";
    return {
      ok: false,
      status: 0,
      code: timedOut ? "timeout" : "unreachable",
      message: timedOut ? `${url} did not answer within ${timeoutMs / 1000} s` : `${url} is not reachable: ${err?.message ?? String(e)}`,
    };
  }
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON: reported below */
  }
  if (res.ok) {
    if (json === undefined) return { ok: false, status: res.status, code: "bad_response", message: `${url} answered with something that is not JSON` };
    return { ok: true, json };
  }
  const e = (json as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  return {
    ok: false,
    status: res.status,
    code: typeof e?.code === "string" ? e.code : `http_${res.status}`,
    message: typeof e?.message === "string" ? e.message : `${url} answered HTTP ${res.status}`,
  };
}

// ------------------------------------------------------------------ a /v1/diagnose answer as Markdown

const MD_LABELS = {
  en: { causes: "Likely causes", unsure: "No confident match; the closest cases:", fix: "Fix", why: "Why it matched", sources: "Sources", also: "Also noticed in your files", ask: "To narrow it down", none: "No cause found." },
  zh: { causes: "可能的原因", unsure: "没有可以确信匹配的案例；最接近的案例：", fix: "解决办法", why: "匹配依据", sources: "来源", also: "在你的文件中还注意到", ask: "为了进一步确认", none: "没有找到原因。" },
};

interface CauseJson {
  case_id?: string;
  title?: string;
  cause?: string;
  resolution?: string;
  fixes?: string[];
  diffs?: string[];
  evidence?: string[];
  citations?: { n?: number; url?: string; title?: string }[];
}

function causeMd(i: number, c: CauseJson, L: (typeof MD_LABELS)["en"]): string {
  const out = [`### ${i}. ${c.title ?? c.case_id ?? ""}`, "", `${c.cause ?? ""}${c.case_id ? ` \`${c.case_id}\`` : ""}`];
  if (c.resolution) out.push("", c.resolution);
  if (c.evidence?.length) out.push("", `**${L.why}:**`, ...c.evidence.map((e) => `- ${e}`));
  if (c.fixes?.length) out.push("", `**${L.fix}:**`, ...c.fixes.map((f) => `- ${f}`));
  for (const d of c.diffs ?? []) out.push("", "```diff", d.trimEnd(), "```");
  const cites = (c.citations ?? []).filter((x) => x.url).map((x) => `[[${x.n ?? "•"}]](${x.url})`);
  if (cites.length) out.push("", `${L.sources}: ${cites.join(" ")}`);
  return out.join("\n");
}

/**
 * The Diagnosis JSON of /v1/diagnose as Markdown (the local server's `trainfix.diagnose` returns Markdown itself;
 * the HTTP API returns data, so the extension renders the parts a reader needs: summary, causes, fixes, sources).
 */
export function diagnosisToMarkdown(json: unknown): string {
  const d = (json ?? {}) as {
    language?: string;
    confident?: boolean;
    summary?: string;
    causes?: CauseJson[];
    related?: CauseJson[];
    also_noticed?: CauseJson[];
    clarify?: { question?: string; options?: string[] } | null;
    plot_alt?: string;
  };
  const L = MD_LABELS[d.language === "zh" ? "zh" : "en"];
  const out: string[] = [];
  if (d.summary) out.push(`**${d.summary}**`);
  const list = (d.confident ? d.causes : d.related) ?? [];
  if (list.length) {
    out.push(d.confident ? `## ${L.causes}` : L.unsure);
    list.forEach((c, i) => out.push(causeMd(i + 1, c, L)));
  } else if (!d.summary) {
    out.push(L.none);
  }
  if (d.also_noticed?.length) {
    out.push(`## ${L.also}`, d.also_noticed.map((c) => `- **${c.title ?? c.case_id}**${c.evidence?.[0] ? ` — ${c.evidence[0]}` : ""}`).join("\n"));
  }
  if (d.clarify?.question) out.push(`**${L.ask}:** ${d.clarify.question}${d.clarify.options?.length ? ` (${d.clarify.options.join(" / ")})` : ""}`);
  if (d.plot_alt) out.push(`> ${d.plot_alt}`);
  return out.join("\n\n");
}

/** `trainfix.diagnose`'s answer over LSP: Markdown as a string (or {markdown}/{value} if the server wraps it). */
export function commandResultToMarkdown(result: unknown): string {
  if (typeof result === "string") return result;
  const o = (result ?? {}) as Record<string, unknown>;
  for (const k of ["markdown", "value", "answer"]) if (typeof o[k] === "string") return o[k] as string;
  throw new Error("trainfix lsp returned no Markdown for trainfix.diagnose");
}
