/**
 * The trainfix extension: a language client for a local `trainfix lsp`, or, with `trainfix.serverUrl`, a small
 * HTTP linter over a shared `trainfix serve`. Decisions live in options.ts; this file only wires them to VS Code.
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from "vscode-languageclient/node";

import * as o from "./options";

let output: vscode.OutputChannel;
let client: LanguageClient | undefined;
let http: HttpLinter | undefined;
let current: o.LocalPlan | o.HttpPlan | undefined;

export async function activate(ctx: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("trainfix");
  ctx.subscriptions.push(
    output,
    vscode.commands.registerCommand("trainfix.diagnoseFile", () => diagnoseFile()),
    vscode.commands.registerCommand("trainfix.restart", () => restart()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("trainfix") && !e.affectsConfiguration("trainfix.trace")) void restart();
    }),
    { dispose: () => void stop() },
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await stop();
}

function settings(): o.Settings {
  const cfg = vscode.workspace.getConfiguration("trainfix");
  return o.readSettings((k) => cfg.get(k), process.env);
}

async function start(): Promise<void> {
  let p: o.LocalPlan | o.HttpPlan;
  try {
    p = o.plan(settings(), vscode.env.language);
  } catch (e) {
    void vscode.window.showErrorMessage(`trainfix: ${(e as Error).message}`);
    return;
  }
  current = p;
  if (p.mode === "server") {
    output.appendLine(`trainfix: using the server ${p.lintUrl.replace(/\/v1\/lint$/, "")} (lang ${p.lang})`);
    http = new HttpLinter(p);
    return;
  }
  output.appendLine(`trainfix: starting ${p.server.command} ${p.server.args.join(" ")} (lang ${p.lang})`);
  const serverOptions: ServerOptions = { command: p.server.command, args: p.server.args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: p.client.documentSelector,
    initializationOptions: p.client.initializationOptions,
    diagnosticCollectionName: p.client.diagnosticCollectionName,
    outputChannel: output,
  };
  const c = new TrainfixClient(p.client.locale, serverOptions, clientOptions);
  try {
    await c.start();
    client = c;
  } catch (e) {
    const pick = await vscode.window.showErrorMessage(
      `trainfix: could not start "${p.server.command} ${p.server.args.join(" ")}": ${(e as Error).message}. ` +
        "Set trainfix.path (the trainfix executable) or trainfix.pythonPath (a Python with trainfix installed), or trainfix.serverUrl.",
      "Open settings",
    );
    if (pick) void vscode.commands.executeCommand("workbench.action.openSettings", "trainfix");
  }
}

async function stop(): Promise<void> {
  const c = client;
  client = undefined;
  http?.dispose();
  http = undefined;
  if (c) {
    try {
      await c.stop(2000);
    } catch (e) {
      output.appendLine(`trainfix: stopping the server: ${(e as Error).message}`);
    }
  }
}

async function restart(): Promise<void> {
  await stop();
  await start();
}

async function diagnoseFile(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    void vscode.window.showInformationMessage("trainfix: open the config, launch script or log to diagnose first.");
    return;
  }
  const doc = editor.document;
  const question = await vscode.window.showInputBox({
    title: "trainfix: Diagnose this file",
    prompt: "What do you see? e.g. “loss goes to 0 after 10 steps” / “loss 变成 NaN”",
    validateInput: (v) => (v.trim() ? (v.length > o.LIMITS.questionMaxChars ? "too long" : undefined) : "describe the problem"),
  });
  if (!question) return;
  const md = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: "trainfix: diagnosing…", cancellable: false },
    async () => {
      try {
        if (current?.mode === "server") {
          const name = o.fileNameFor(doc.uri.scheme === "file" ? doc.uri.fsPath : undefined, doc.languageId);
          const body = o.diagnoseBody(question, name, doc.getText(), current.diagnoseLang);
          const r = await o.postJson(fetch as unknown as o.FetchLike, current.diagnoseUrl, body, current.headers, o.LIMITS.diagnoseTimeoutMs);
          if (!r.ok) throw new Error(`${r.code}: ${r.message}`);
          return o.diagnosisToMarkdown(r.json);
        }
        if (!client) throw new Error("the trainfix language server is not running (see the trainfix output)");
        const res = await client.sendRequest(ExecuteCommandRequest.type, { command: "trainfix.diagnose", arguments: [doc.uri.toString(), question] });
        return o.commandResultToMarkdown(res);
      } catch (e) {
        void vscode.window.showErrorMessage(`trainfix: ${(e as Error).message}`);
        return undefined;
      }
    },
  );
  if (md === undefined) return;
  const answer = await vscode.workspace.openTextDocument({ content: md, language: "markdown" });
  try {
    await vscode.commands.executeCommand("markdown.showPreviewToSide", answer.uri);
  } catch {
    await vscode.window.showTextDocument(answer, vscode.ViewColumn.Beside);
  }
}

/** A language client whose `initialize` carries the trainfix.language setting as `locale` (not VS Code's UI language). */
class TrainfixClient extends LanguageClient {
  constructor(private readonly trainfixLocale: string, serverOptions: ServerOptions, clientOptions: LanguageClientOptions) {
    super("trainfix", "trainfix", serverOptions, clientOptions);
  }

  protected override getLocale(): string {
    return this.trainfixLocale;
  }
}

function toDiagnostic(doc: vscode.TextDocument, d: o.DiagnosticData): vscode.Diagnostic {
  const r = doc.validateRange(new vscode.Range(d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character));
  const diag = new vscode.Diagnostic(r, d.message, d.severity as vscode.DiagnosticSeverity);
  diag.source = d.source;
  if (typeof d.code === "object") diag.code = d.code.target ? { value: d.code.value, target: vscode.Uri.parse(d.code.target) } : d.code.value;
  else diag.code = d.code;
  return diag;
}

/** Server-URL mode: lint open documents through POST /v1/lint on open, change (debounced) and save. */
class HttpLinter {
  private readonly collection = vscode.languages.createDiagnosticCollection("trainfix");
  private readonly subs: vscode.Disposable[] = [];
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly seq = new Map<string, number>();
  private readonly warned = new Set<string>();

  constructor(private readonly p: o.HttpPlan) {
    this.subs.push(
      vscode.workspace.onDidOpenTextDocument((d) => this.lint(d)),
      vscode.workspace.onDidSaveTextDocument((d) => this.lint(d)),
      vscode.workspace.onDidChangeTextDocument((e) => this.schedule(e.document)),
      vscode.workspace.onDidCloseTextDocument((d) => {
        this.collection.delete(d.uri);
        clearTimeout(this.timers.get(d.uri.toString()));
      }),
    );
    for (const d of vscode.workspace.textDocuments) void this.lint(d);
  }

  dispose(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    for (const s of this.subs) s.dispose();
    this.collection.dispose();
  }

  private schedule(doc: vscode.TextDocument): void {
    const key = doc.uri.toString();
    clearTimeout(this.timers.get(key));
    this.timers.set(key, setTimeout(() => void this.lint(doc), o.LIMITS.changeDebounceMs));
  }

  private async lint(doc: vscode.TextDocument): Promise<void> {
    if (!o.isTrainfixDocument(doc.languageId, doc.uri.scheme)) return;
    const key = doc.uri.toString();
    const n = (this.seq.get(key) ?? 0) + 1;
    this.seq.set(key, n);
    const name = o.fileNameFor(doc.uri.scheme === "file" ? doc.uri.fsPath : undefined, doc.languageId);
    const text = doc.getText();
    const body = o.lintBody(name, text, this.p.lang);
    if (!body) {
      this.collection.set(doc.uri, [toDiagnostic(doc, o.tooLargeDiagnostic(text.length, this.p.lang))]);
      return;
    }
    const r = await o.postJson(fetch as unknown as o.FetchLike, this.p.lintUrl, body, this.p.headers, o.LIMITS.lintTimeoutMs);
    if (this.seq.get(key) !== n || doc.isClosed) return; // a newer edit is being linted, or the document is gone
    if (!r.ok) {
      output.appendLine(`trainfix: lint ${name}: ${r.code}: ${r.message}`);
      if (!this.warned.has(r.code)) {
        this.warned.add(r.code);
        void vscode.window.showWarningMessage(`trainfix: the server did not lint ${name} (${r.code}): ${r.message}`);
      }
      return;
    }
    try {
      this.collection.set(doc.uri, o.lintResponseToDiagnostics(r.json).map((d) => toDiagnostic(doc, d)));
    } catch (e) {
      output.appendLine(`trainfix: lint ${name}: ${(e as Error).message}`);
    }
  }
}
