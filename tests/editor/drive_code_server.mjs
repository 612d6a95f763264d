// Drives a real VS Code (code-server) in Debian's chromium through playwright-core, the way a user
// would: opens a CUDA file, finds "Port to MLX" in the code lens and the lightbulb menu, clicks it,
// watches the progress, waits for the candidate diff, accepts it, and reads the inlay hint and the
// hover.  Takes a screenshot at each step.  Called by test_vscode_editor.py with one JSON argument;
// prints one JSON object (what it saw) on stdout and exits 0, or 1 with {"error": ...} on a failure.
import { createRequire } from "node:module";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

const cfg = JSON.parse(process.argv[2]);
// { url, folder, file, kernel, kernelLine, portTitle, acceptTitle, playwright, chromium, artifacts,
//   timeoutsMs: { start, lens, job } }
const require = createRequire(join(cfg.playwright, "package.json"));
const { chromium } = require("playwright-core");

const seen = { steps: [], console: [] };
const step = (name, extra = {}) => {
  seen.steps.push({ name, t: Date.now(), ...extra });
  process.stderr.write(`[drive] ${name}\n`);
};
const shot = (page, name) => page.screenshot({ path: join(cfg.artifacts, name) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Python files in the workspace (not under .ksearch or hidden folders), with their sizes. */
function pythonFiles(dir) {
  const out = {};
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      if (name.startsWith(".")) continue;
      const p = join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else if (name.endsWith(".py")) out[p] = st.size;
    }
  };
  walk(dir);
  return out;
}

/** How often text occurs in the ksearch.log files under dir (the extension's output channel on disk). */
function countInLogs(dir, text) {
  let n = 0;
  const walk = (d) => {
    if (!existsSync(d)) return;
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name === "ksearch.log") n += readFileSync(p, "utf8").split(text).length - 1;
    }
  };
  walk(dir);
  return n;
}

async function runCommand(page, label) {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 20_000 });
  await input.fill(`>${label}`);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: label }).first().waitFor({ timeout: 20_000 });
  await page.keyboard.press("Enter");
}

async function openFile(page, name) {
  // An open tab first, then the explorer (both what a user clicks); quick open as the last resort.
  const tab = page.locator(".tabs-container .tab", { hasText: name }).first();
  const row = page.locator(".explorer-folders-view .monaco-list-row", { hasText: name }).first();
  if (await tab.isVisible()) {
    await tab.click();
  } else if (await row.isVisible()) {
    await row.click();
  }
  if (await page.locator(".tab.active", { hasText: name }).isVisible()) {
    return;
  }
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 20_000 });
  await input.fill(name);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: name }).first().waitFor({ timeout: 20_000 });
  await page.keyboard.press("Enter");
  await page.locator(".tab.active", { hasText: name }).waitFor({ timeout: 30_000 });
}

async function gotoLine(page, line) {
  await page.keyboard.press("Control+G");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 20_000 });
  await input.fill(`:${line}`);
  await page.keyboard.press("Enter");
}

/** Text of the rendered source line that holds the kernel's name (inlay hints are part of it). */
async function kernelLineText(page) {
  const line = page.locator(".editor-instance .view-line", { hasText: `${cfg.kernel}(` }).first();
  return (await line.textContent({ timeout: 5_000 }).catch(() => "")) ?? "";
}

/** Traces ksearch's messages, stores a Gemini key, restarts the server (it gets the key again in
 * initialize); the test then reads the logs and settings for the key. */
async function storeKeyAndRestart(page) {
  await runCommand(page, "Developer: Set Log Level...");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: /^ksearch$/ }).first().click();
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "Trace" }).first().click();
  step("ksearch log level: trace");
  await runCommand(page, "ksearch: Set Gemini API Key");
  const input = page.locator(".quick-input-widget input[type=password]");
  await input.waitFor({ state: "visible", timeout: 20_000 });
  await input.fill(cfg.key);
  await page.keyboard.press("Enter");
  const stored = page.locator(".notification-toast", { hasText: "key stored" }).first();
  await stored.waitFor({ state: "visible", timeout: 20_000 });
  await sleep(600);
  seen.keyNotification = (await stored.innerText()).replace(/\s+/g, " ");
  await shot(page, "06-api-key.png");
  step("key stored");
  await runCommand(page, "ksearch: Restart Server");
  // The restarted server has been sent initialize once the trace shows the (blanked) key a second time;
  // the browser must stay open till then, or the extension host shuts down with it.
  const deadline = Date.now() + cfg.timeoutsMs.lens;
  while (Date.now() < deadline && countInLogs(cfg.logs, '"geminiApiKey": "***"') < 2) await sleep(250);
  step("server restarted");
}

const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
let page;
try {
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") seen.console.push(m.text().slice(0, 300));
  });
  await page.goto(`${cfg.url}/?folder=${encodeURIComponent(cfg.folder)}`);
  await page.locator(".monaco-workbench").waitFor({ timeout: cfg.timeoutsMs.start });
  await page.locator(".statusbar").waitFor({ timeout: cfg.timeoutsMs.start });
  await page.locator(".explorer-folders-view .monaco-list-row", { hasText: cfg.file }).first()
    .waitFor({ timeout: cfg.timeoutsMs.start });
  step("workbench loaded");

  await openFile(page, cfg.file);
  await page.locator(".editor-instance .view-lines", { hasText: cfg.kernel }).first().waitFor({ timeout: 60_000 });
  step("file opened");

  if (cfg.mode === "missing") {
    // No usable interpreter: an error notification must say which one and how to fix it.
    const toast = page.locator(".notification-toast", { hasText: cfg.expect }).first();
    await toast.waitFor({ state: "visible", timeout: cfg.timeoutsMs.lens });
    seen.notification = (await toast.innerText()).replace(/\s+/g, " ");
    await shot(page, "00-missing-ksearch.png");
    step("install hint shown");
    if (cfg.fixedSettings) {
      // The user follows the hint and points ksearch.interpreter at a Python with ksearch: the
      // extension restarts the server on the settings change and the lenses appear.
      await toast.locator(".monaco-button", { hasText: "Set ksearch.interpreter" }).first().click();
      const field = page.locator(".settings-editor .setting-item-text input").first();
      await field.waitFor({ state: "visible", timeout: 30_000 });
      // Wait for the settings editor to show the current (bad) value before replacing it: typing into a
      // field that is still being rendered loses keystrokes.
      await page.waitForFunction((el) => el && el.value.length > 0, await field.elementHandle(), { timeout: 30_000 });
      await sleep(500);
      await field.fill(cfg.fixedSettings.interpreter);
      // The settings editor writes the value after a short debounce: wait until it is on disk.
      const written = Date.now() + 30_000;
      while (Date.now() < written && !readFileSync(cfg.fixedSettings.path, "utf8").includes(JSON.stringify(cfg.fixedSettings.interpreter))) {
        await sleep(250);
      }
      step("interpreter setting written");
      await shot(page, "00-fix-interpreter.png");
      await page.keyboard.press("Escape"); // closes the settings editor
      await page.locator(".codelens-decoration a", { hasText: cfg.portTitle }).first().waitFor({ timeout: cfg.timeoutsMs.lens });
      seen.lensesAfterFix = await page.locator(".codelens-decoration a").allTextContents();
      await sleep(1000);
      seen.settingsAfterFix = JSON.parse(readFileSync(cfg.fixedSettings.path, "utf8"));
      step("lenses after the fix", { lenses: seen.lensesAfterFix });
    }
    seen.ok = true;
    process.stdout.write(JSON.stringify(seen));
    await browser.close();
    process.exit(0);
  }

  // 1. The code lens and the lightbulb both offer the port.
  const portLens = page.locator(".codelens-decoration a", { hasText: cfg.portTitle }).first();
  await portLens.waitFor({ timeout: cfg.timeoutsMs.lens });
  seen.lenses = await page.locator(".codelens-decoration a").allTextContents();
  step("code lens shown", { lenses: seen.lenses });
  seen.kernelLineBefore = await kernelLineText(page);

  await gotoLine(page, cfg.kernelLine);
  const bulb = page.locator(".lightBulbWidget .codicon, .lightBulbWidget").first();
  await bulb.waitFor({ state: "visible", timeout: 45_000 });
  step("lightbulb shown");
  await page.keyboard.press("Control+.");
  const menu = page.locator(".action-widget:not(.action-list-submenu-panel)").first();
  await menu.waitFor({ state: "visible", timeout: 20_000 });
  await menu.locator(".action-list-item, .monaco-list-row", { hasText: cfg.portTitle }).first().waitFor({ timeout: 20_000 });
  seen.actions = (await menu.innerText()).split("\n").map((s) => s.trim()).filter(Boolean);
  await shot(page, "01-action.png");
  step("lightbulb menu offers the port", { actions: seen.actions });
  await page.keyboard.press("Escape");
  await menu.waitFor({ state: "hidden", timeout: 5_000 }).catch(() => undefined);

  // 2. Start the port from the code lens; progress shows while it runs.
  const filesBefore = pythonFiles(cfg.folder);
  await portLens.click();
  step("port clicked");
  const statusbar = page.locator(".statusbar");
  const diff = page.locator(".monaco-diff-editor").first();
  const progressDeadline = Date.now() + 60_000;
  seen.progress = null;
  seen.runningLenses = null;
  // While the job runs: the status bar says "ksearch: N running" and the lens over the kernel becomes
  // "⟳ Port … | Cancel". (The idle status item reads just "ksearch": it must not count as progress.)
  while (Date.now() < progressDeadline && (seen.progress === null || seen.runningLenses === null)) {
    const text = (await statusbar.innerText()).replace(/\s+/g, " ");
    if (seen.progress === null && /ksearch: \d+ (running|queued)/i.test(text)) seen.progress = text;
    const lenses = await page.locator(".codelens-decoration a").allTextContents();
    if (seen.runningLenses === null && lenses.some((l) => l.includes("⟳"))) {
      seen.runningLenses = lenses;
      await shot(page, "02-progress.png");
    }
    if (await diff.isVisible()) break;
    await sleep(100);
  }
  step("running lenses", { lenses: seen.runningLenses });
  step("progress", { text: seen.progress });

  // 3. When the job ends the server asks the client to show the best candidate as a diff.
  await diff.waitFor({ state: "visible", timeout: cfg.timeoutsMs.job });
  await sleep(1500);
  seen.diffTitle = await page.locator(".tab.active").innerText().catch(() => "");
  seen.diffCandidate = await page
    .locator(".monaco-diff-editor .editor.modified .view-lines")
    .first()
    .innerText()
    .catch(() => "");
  await shot(page, "03-diff.png");
  step("diff shown", { title: seen.diffTitle });

  // 4. Accept from the code lens over the kernel in the source file.
  await openFile(page, cfg.file);
  const acceptLens = page.locator(".codelens-decoration a", { hasText: cfg.acceptTitle }).first();
  await acceptLens.waitFor({ timeout: 60_000 });
  seen.lensesAfterJob = await page.locator(".codelens-decoration a").allTextContents();
  await acceptLens.click();
  step("accept clicked", { lenses: seen.lensesAfterJob });
  const newFile = async () => {
    const now = pythonFiles(cfg.folder);
    return Object.keys(now).find((p) => !(p in filesBefore) && now[p] > 0);
  };
  const acceptDeadline = Date.now() + 30_000;
  seen.portFile = null;
  while (Date.now() < acceptDeadline && !(seen.portFile = (await newFile()) ?? null)) await sleep(200);
  seen.savedByUser = false;
  if (!seen.portFile) {
    // Edits the editor applied but left unsaved: save them the way a user would.
    await runCommand(page, "File: Save All");
    seen.savedByUser = true;
    const saveDeadline = Date.now() + 10_000;
    while (Date.now() < saveDeadline && !(seen.portFile = (await newFile()) ?? null)) await sleep(200);
  }
  await openFile(page, cfg.file);
  await sleep(1500);
  seen.kernelLineAfter = await kernelLineText(page);
  await shot(page, "04-accepted.png");
  step("accepted", { portFile: seen.portFile, kernelLine: seen.kernelLineAfter });

  // 5. The hover over the kernel's name shows the result.
  const name = page.locator(".editor-instance .view-line span", { hasText: new RegExp(`^${cfg.kernel}$`) }).first();
  await name.hover();
  const hover = page.locator(".monaco-hover:not(.hidden) .monaco-hover-content, .monaco-hover:not(.hidden)").first();
  await hover.waitFor({ state: "visible", timeout: 30_000 });
  await sleep(500);
  seen.hover = await hover.innerText();
  await shot(page, "05-hover.png");
  step("hover shown");
  await page.mouse.move(5, 400);
  if (cfg.key) await storeKeyAndRestart(page);
  seen.ok = true;
  process.stdout.write(JSON.stringify(seen));
  await browser.close();
} catch (error) {
  seen.ok = false;
  seen.error = String(error && error.stack ? error.stack : error);
  if (page) {
    await shot(page, "error.png").catch(() => undefined);
    seen.statusbar = await page.locator(".statusbar").innerText().catch(() => "");
    seen.notifications = await page.locator(".notifications-toasts").innerText().catch(() => "");
  }
  process.stdout.write(JSON.stringify(seen));
  await browser.close();
  process.exit(1);
}
