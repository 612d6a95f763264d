/**
 * A log output channel that blanks the Gemini key out of every line before it is written, so the
 * server log and the LSP message trace (which would otherwise show `initialize` and `ksearch/secret`)
 * never contain it.
 */
import * as vscode from "vscode";
import { redact } from "./settings";

export class RedactingChannel implements vscode.LogOutputChannel {
  private readonly secrets = new Set<string>();

  constructor(private readonly inner: vscode.LogOutputChannel) {}

  /** Adds a text to blank out from now on (a key once seen stays blanked, even after it is cleared). */
  addSecret(secret: string | undefined): void {
    if (secret) {
      this.secrets.add(secret);
    }
  }

  private clean(text: string): string {
    return redact(text, [...this.secrets]);
  }

  private cleanArgs(args: unknown[]): unknown[] {
    return args.map((a) => (typeof a === "string" ? this.clean(a) : a));
  }

  get name(): string {
    return this.inner.name;
  }
  get logLevel(): vscode.LogLevel {
    return this.inner.logLevel;
  }
  get onDidChangeLogLevel(): vscode.Event<vscode.LogLevel> {
    return this.inner.onDidChangeLogLevel;
  }
  trace(message: string, ...args: unknown[]): void {
    this.inner.trace(this.clean(message), ...this.cleanArgs(args));
  }
  debug(message: string, ...args: unknown[]): void {
    this.inner.debug(this.clean(message), ...this.cleanArgs(args));
  }
  info(message: string, ...args: unknown[]): void {
    this.inner.info(this.clean(message), ...this.cleanArgs(args));
  }
  warn(message: string, ...args: unknown[]): void {
    this.inner.warn(this.clean(message), ...this.cleanArgs(args));
  }
  error(error: string | Error, ...args: unknown[]): void {
    const cleaned = typeof error === "string" ? this.clean(error) : new Error(this.clean(error.message));
    this.inner.error(cleaned, ...this.cleanArgs(args));
  }
  append(value: string): void {
    this.inner.append(this.clean(value));
  }
  appendLine(value: string): void {
    this.inner.appendLine(this.clean(value));
  }
  replace(value: string): void {
    this.inner.replace(this.clean(value));
  }
  clear(): void {
    this.inner.clear();
  }
  show(columnOrPreserve?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserve === "boolean" || columnOrPreserve === undefined) {
      this.inner.show(columnOrPreserve);
    } else {
      this.inner.show(columnOrPreserve, preserveFocus);
    }
  }
  hide(): void {
    this.inner.hide();
  }
  dispose(): void {
    this.inner.dispose();
  }
}
