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

/** Waits until the server's result is shown: a diff editor, or a candidate module alone (a `ksearch-candidate:`
 * document: its tab is a `*_mlx.py` name that is not on disk yet, and the title bar carries Accept Candidate).
 * Returns how it was shown, its tab title and the visible text of the candidate side. */
async function waitForCandidate(page, timeout, tabPattern = /_mlx\.py/) {
  const diff = page.locator(".monaco-diff-editor").first();
  // an active tab with the module's name, and the Accept Candidate button of the editor title bar
  const activeTab = page.locator(".tab.active", { hasText: tabPattern }).first();
  const acceptButton = page.locator(".editor-actions [aria-label*='Accept Candidate']").first();
  const deadline = Date.now() + timeout;
  let view = null;
  while (Date.now() < deadline && view === null) {
    if (await diff.isVisible()) view = "diff";
    else if ((await activeTab.isVisible()) && (await acceptButton.isVisible())) view = "preview";
    else await sleep(200);
  }
  if (view === null) {
    seen.candidateDebug = { tabs: await page.locator(".tab.active").allInnerTexts().catch(() => []),
      accept: await acceptButton.count().catch(() => -1), diffs: await page.locator(".monaco-diff-editor").count() };
  }
  if (view === null) throw new Error(`no candidate was shown within ${timeout} ms (neither a diff nor a candidate preview)`);
  await sleep(1500);
  const text = view === "diff"
    ? page.locator(".monaco-diff-editor .editor.modified .view-lines").first()
    : page.locator(".editor-group-container .view-lines").first();
  return {
    candidateView: view,
    candidateTitle: (await activeTab.innerText().catch(() => "")).trim(),
    candidateTabClass: (await activeTab.getAttribute("class").catch(() => "")) ?? "",
    candidateTitleBarAccept: await acceptButton.isVisible(),
    candidateText: await text.innerText().catch(() => ""),
  };
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

const lensTexts = (page) => page.locator(".codelens-decoration a").allTextContents();
const count = (list, text) => list.filter((t) => t.includes(text)).length;

/** Polls the code lenses of the active editor until pred(lenses) holds; returns them. */
async function waitLenses(page, pred, timeout, what) {
  const deadline = Date.now() + timeout;
  let lenses = [];
  while (Date.now() < deadline) {
    lenses = await lensTexts(page);
    if (pred(lenses)) return lenses;
    await sleep(250);
  }
  throw new Error(`${what} not seen within ${timeout} ms; lenses: ${JSON.stringify(lenses)}`);
}

/** Errors and warnings the status bar counts (VS Code's problems item). */
async function problems(page) {
  const label = (await page.locator("[id='status.problems'] a, [id='status.problems']").first()
    .getAttribute("aria-label").catch(() => "")) ?? "";
  const text = (await page.locator("[id='status.problems']").first().innerText().catch(() => "")).replace(/\s+/g, " ").trim();
  const nums = text.match(/\d+/g) ?? [];
  return { label, text, errors: nums.length ? Number(nums[0]) : null, warnings: nums.length > 1 ? Number(nums[1]) : null };
}

/** Texts of the notification toasts on screen. */
async function toasts(page) {
  return (await page.locator(".notification-toast").allInnerTexts().catch(() => [])).map((t) => t.replace(/\s+/g, " "));
}

async function waitToast(page, text, timeout) {
  const toast = page.locator(".notification-toast", { hasText: text }).first();
  await toast.waitFor({ state: "visible", timeout });
  return (await toast.innerText()).replace(/\s+/g, " ");
}

/** Opens a workspace file beside the active editor (Quick Open, Ctrl+Enter). */
async function openToSide(page, name) {
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "hidden", timeout: 10_000 }).catch(() => undefined);   // an earlier Quick Open closed
  await sleep(800);
  await page.keyboard.press("Control+P");
  await input.waitFor({ state: "visible", timeout: 20_000 });
  await input.fill(name);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: name }).first().waitFor({ timeout: 20_000 });
  await page.keyboard.press("Control+Enter");
  await page.locator(".tab.active", { hasText: name }).first().waitFor({ timeout: 30_000 });
}

/** Waits for the new Python file whose name holds `needle` (not in `before`); returns its path. */
async function waitNewFile(before, needle, timeout) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    const now = pythonFiles(cfg.folder);
    const hit = Object.keys(now).find((p) => !(p in before) && now[p] > 0 && p.split("/").pop().includes(needle));
    if (hit) return hit;
    await sleep(200);
  }
  return null;
}

/** The statuses ksearch shows while jobs run, until none runs for `quietMs` (after one was seen or `graceMs`). */
async function waitJobsIdle(page, timeout, quietMs = 3000, graceMs = 15_000) {
  const start = Date.now();
  let seenRunning = null;
  let quietSince = null;
  while (Date.now() - start < timeout) {
    const text = (await page.locator(".statusbar").innerText()).replace(/\s+/g, " ");
    const running = /ksearch: \d+ (running|queued)/i.test(text);
    if (running) {
      seenRunning = seenRunning ?? text;
      quietSince = null;
    } else if (seenRunning !== null || Date.now() - start > graceMs) {
      quietSince = quietSince ?? Date.now();
      if (Date.now() - quietSince >= quietMs) return seenRunning;
    }
    await sleep(250);
  }
  throw new Error(`ksearch jobs still running after ${timeout} ms`);
}

/** Folds the top-level regions of the active editor (Fold Level 1: the licence comment, every function body) and
 * goes to the top, so that all the kernels' signature lines and their lenses are on one screen. */
async function foldAll(page) {
  await page.locator(".editor-instance .view-lines").first().click();
  await page.keyboard.press("Control+K");
  await page.keyboard.press("Control+1");
  await sleep(500);
  await page.keyboard.press("Control+Home");
  await sleep(800);
}

/** Issue 16's must-show on a real multi-kernel CUDA file: lenses on every kernel, both kernels ported and
 * accepted side by side into their own modules, an Optimize that found nothing better saying so, a broken
 * file refused with its actions disabled and the reason. */
async function corpusScenario(page) {
  const kernels = cfg.kernels;   // [{name, line}] of cfg.file
  // (a) Every kernel of the file gets its lenses (the file folded so that all of them are on one screen).
  await foldAll(page);
  seen.corpusLenses = await waitLenses(page, (l) => count(l, cfg.portTitle) >= kernels.length, cfg.timeoutsMs.lens,
    `${kernels.length} "${cfg.portTitle}" lenses`);
  await sleep(2000);   // diagnostics arrive with the first parse
  seen.corpusProblems = await problems(page);
  await shot(page, "06-lenses-all-kernels.png");
  step("lenses on every kernel", { lenses: seen.corpusLenses, problems: seen.corpusProblems });

  // (c) Port all kernels in file (lightbulb), then accept each kernel's port: two modules side by side.
  await gotoLine(page, kernels[0].line);
  await page.locator(".lightBulbWidget").first().waitFor({ state: "visible", timeout: 45_000 });
  await page.keyboard.press("Control+.");
  const menu = page.locator(".action-widget:not(.action-list-submenu-panel)").first();
  await menu.waitFor({ state: "visible", timeout: 20_000 });
  const portAll = menu.locator(".action-list-item, .monaco-list-row", { hasText: "Port all kernels in file" }).first();
  await portAll.waitFor({ timeout: 20_000 });
  seen.corpusActions = (await menu.innerText()).split("\n").map((s) => s.trim()).filter(Boolean);
  const before = pythonFiles(cfg.folder);
  await portAll.click();
  step("port all clicked", { actions: seen.corpusActions });
  seen.portAllProgress = await waitJobsIdle(page, cfg.timeoutsMs.job);
  seen.portAllNotifications = await toasts(page);
  step("port all ended", { progress: seen.portAllProgress, notifications: seen.portAllNotifications });
  await openFile(page, cfg.file);
  await foldAll(page);
  seen.corpusLensesAfterPort = await waitLenses(page, (l) => count(l, cfg.acceptTitle) >= kernels.length, 60_000,
    `an "${cfg.acceptTitle}" lens over each of the ${kernels.length} kernels`);
  seen.modules = {};
  seen.moduleTexts = {};
  for (let i = 0; i < kernels.length; i++) {
    const lenses = await lensTexts(page);
    const accept = page.locator(".codelens-decoration a", { hasText: new RegExp(`^${cfg.acceptTitle}$`) }).first();
    await accept.click();
    // which kernel's Accept it was shows in the module that appears (each kernel has its own)
    const remaining = kernels.filter((k) => !(k.name in seen.modules));
    let path = null;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && path === null) {
      for (const k of remaining) {
        const hit = await waitNewFile(before, k.name, 200);
        if (hit) { seen.modules[k.name] = hit; path = hit; break; }
      }
    }
    if (path === null) throw new Error(`Accept #${i + 1} wrote no module (lenses: ${JSON.stringify(lenses)})`);
    await sleep(1000);
    for (const [name, p] of Object.entries(seen.modules)) seen.moduleTexts[name] = seen.moduleTexts[name] ?? readFileSync(p, "utf8");
    step("accepted", { module: path, notifications: await toasts(page) });
    await waitLenses(page, (l) => count(l, "Accepted") >= i + 1, 30_000, `${i + 1} "Accepted" lens(es)`);
  }
  // the first module is still what its own Accept wrote after the second Accept
  seen.moduleTextsAfter = Object.fromEntries(Object.entries(seen.modules).map(([n, p]) => [n, readFileSync(p, "utf8")]));
  seen.corpusLensesAccepted = await lensTexts(page);
  seen.acceptNotifications = await toasts(page);
  await runCommand(page, "Notifications: Clear All Notifications").catch(() => undefined);
  await runCommand(page, "View: Toggle Primary Side Bar Visibility");
  for (const k of kernels) await openToSide(page, seen.modules[k.name].split("/").pop());
  await sleep(1500);
  await shot(page, "08-two-accepted.png");
  step("two kernels accepted side by side", { lenses: seen.corpusLensesAccepted });
  await runCommand(page, "View: Close All Editors");
  await runCommand(page, "View: Toggle Primary Side Bar Visibility");

  // (b) Optimize on a kernel where no candidate beats the user's: the lens and a message say so, nothing to accept.
  await openFile(page, cfg.optimizeFile);
  await page.locator(".editor-instance .view-lines", { hasText: cfg.optimizeKernel }).first().waitFor({ timeout: 60_000 });
  const optimize = page.locator(".codelens-decoration a", { hasText: cfg.optimizeTitle }).first();
  await optimize.waitFor({ timeout: cfg.timeoutsMs.lens });
  await optimize.click();
  step("optimize clicked");
  seen.noGainLenses = await waitLenses(page, (l) => l.some((t) => /^No candidate (beat|passed)/.test(t)) || count(l, cfg.acceptTitle) > 0,
    cfg.timeoutsMs.job, "the Optimize result lens");
  seen.noGainMessage = await waitToast(page, "no candidate beat", 20_000).catch(() => null);
  seen.noGainNotifications = await toasts(page);
  await sleep(1000);
  await shot(page, "07-no-improvement.png");
  step("optimize ended", { lenses: seen.noGainLenses, message: seen.noGainMessage });
  await runCommand(page, "Notifications: Clear All Notifications").catch(() => undefined);

  // (d) A file that does not parse: diagnostics, lenses that say why the actions are disabled, no job.
  await openFile(page, cfg.brokenFile);
  await page.locator(".editor-instance .view-lines", { hasText: kernels[0].name }).first().waitFor({ timeout: 60_000 });
  seen.brokenLenses = await waitLenses(page, (l) => l.some((t) => t.includes("disabled")), cfg.timeoutsMs.lens,
    "a lens saying the actions are disabled");
  await sleep(1500);
  seen.brokenProblems = await problems(page);
  await page.locator(".codelens-decoration a", { hasText: "disabled" }).first().click();
  seen.brokenMessage = await waitToast(page, "does not parse", 20_000);
  await gotoLine(page, cfg.brokenLine);
  await sleep(500);
  await runCommand(page, "Refactor...");
  const refactor = page.locator(".action-widget:not(.action-list-submenu-panel)").first();
  await refactor.waitFor({ state: "visible", timeout: 20_000 });
  await refactor.locator(".action-list-item, .monaco-list-row", { hasText: cfg.portTitle }).first().waitFor({ timeout: 20_000 });
  seen.brokenActions = (await refactor.innerText()).split("\n").map((s) => s.trim()).filter(Boolean);
  seen.brokenActionsDisabled = await refactor.locator(".action-list-item.option-disabled, .monaco-list-row.option-disabled, [aria-disabled='true']").allInnerTexts();
  await page.keyboard.press("ArrowDown");
  await sleep(800);
  seen.brokenActionHover = await page.locator(".action-widget-action-bar, .monaco-hover:not(.hidden), .action-widget [title]").allInnerTexts().catch(() => []);
  seen.brokenActionTitles = await refactor.locator("[title]").evaluateAll((els) => els.map((e) => e.getAttribute("title"))).catch(() => []);
  await shot(page, "09-broken-refused.png");
  step("broken file refused", { lenses: seen.brokenLenses, actions: seen.brokenActions, disabled: seen.brokenActionsDisabled });
  await page.keyboard.press("Escape");
  seen.brokenStatus = (await page.locator(".statusbar").innerText()).replace(/\s+/g, " ");
}

/** Workspace trust: answers VS Code's "Do you trust the authors" dialog when it comes (cfg.trust: true or false),
 * and reports whether the window ended in Restricted Mode. */
async function answerTrust(page) {
  const dialog = page.locator(".monaco-dialog-box", { hasText: /trust/i }).first();
  seen.trustDialog = false;
  try {
    await dialog.waitFor({ state: "visible", timeout: 20_000 });
    seen.trustDialog = true;
    seen.trustDialogText = (await dialog.innerText()).replace(/\s+/g, " ");
    await shot(page, "10-trust-dialog.png");
    const button = cfg.trust ? /Yes, I trust/i : /No, I don.t trust/i;
    await dialog.locator(".monaco-button", { hasText: button }).first().click();
    await dialog.waitFor({ state: "hidden", timeout: 10_000 });
  } catch (error) {
    if (seen.trustDialog) throw error;     // there was a dialog and it could not be answered
  }
  await sleep(1000);
  const restricted = page.locator(".statusbar-item", { hasText: "Restricted Mode" }).first();
  if (cfg.trust && !seen.trustDialog && (await restricted.isVisible().catch(() => false))) {
    // No prompt (code-server opened the folder in Restricted Mode): the user trusts it from the trust editor, and
    // the extension restarts the server with the workspace's settings.
    await runCommand(page, "Workspaces: Manage Workspace Trust");
    const trust = page.locator(".workspace-trust-editor .monaco-button", { hasText: /^\s*Trust\s*$/ }).first();
    await trust.waitFor({ state: "visible", timeout: 20_000 });
    await trust.click();
    await restricted.waitFor({ state: "hidden", timeout: 20_000 });
    await page.keyboard.press("Control+W");
    const deadline = Date.now() + cfg.timeoutsMs.lens;
    while (Date.now() < deadline && countInLogs(cfg.logs, "ksearch-lsp started") < 2) await sleep(250);
    seen.serverStarts = countInLogs(cfg.logs, "ksearch-lsp started");
    step("workspace trusted from the trust editor", { serverStarts: seen.serverStarts });
  }
  seen.restrictedMode = await restricted.isVisible().catch(() => false);
  step("workspace trust", { dialog: seen.trustDialog, restricted: seen.restrictedMode });
}

/** A cloned, hostile workspace: Port and Optimize the kernel as a user would; the test then checks that none of
 * the workspace's code ran and its endpoint got no connection. */
async function hostileScenario(page) {
  const portLens = page.locator(".codelens-decoration a", { hasText: cfg.portTitle }).first();
  await portLens.waitFor({ timeout: cfg.timeoutsMs.lens });
  seen.lenses = await lensTexts(page);
  await portLens.click();
  step("port clicked", { lenses: seen.lenses });
  Object.assign(seen, await waitForCandidate(page, cfg.timeoutsMs.job));
  step("port shown", { view: seen.candidateView });
  await openFile(page, cfg.file);
  const optimize = page.locator(".codelens-decoration a", { hasText: cfg.optimizeTitle }).first();
  await optimize.waitFor({ timeout: cfg.timeoutsMs.lens });
  await optimize.click();
  step("optimize clicked");
  await waitJobsIdle(page, cfg.timeoutsMs.job);
  await openFile(page, cfg.file);
  seen.lensesAfter = await waitLenses(page, (l) => !l.some((t) => t.includes("⟳")), 30_000, "the optimize's end");
  seen.notifications = await toasts(page);
  await shot(page, cfg.trust ? "11-hostile-trusted.png" : "10-hostile-restricted.png");
  step("optimize ended", { lenses: seen.lensesAfter, notifications: seen.notifications });
}

const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
let page;
try {
  page = await browser.newPage({ viewport: cfg.viewport ?? { width: 1400, height: 900 } });
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") seen.console.push(m.text().slice(0, 300));
  });
  await page.goto(`${cfg.url}/?folder=${encodeURIComponent(cfg.folder)}`);
  await page.locator(".monaco-workbench").waitFor({ timeout: cfg.timeoutsMs.start });
  await page.locator(".statusbar").waitFor({ timeout: cfg.timeoutsMs.start });
  if (cfg.mode === "hostile") await answerTrust(page);
  await page.locator(".explorer-folders-view .monaco-list-row", { hasText: cfg.file }).first()
    .waitFor({ timeout: cfg.timeoutsMs.start });
  step("workbench loaded");

  await openFile(page, cfg.file);
  await page.locator(".editor-instance .view-lines", { hasText: cfg.firstScreenText ?? cfg.kernel }).first().waitFor({ timeout: 60_000 });
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

  if (cfg.mode === "hostile") {
    await hostileScenario(page);
    seen.ok = true;
    process.stdout.write(JSON.stringify(seen));
    await browser.close();
    process.exit(0);
  }

  if (cfg.mode === "corpus") {
    await corpusScenario(page);
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
  const shown = page.locator(".monaco-diff-editor, .tab.active:has-text('_mlx.py')").first();
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
    if (await shown.isVisible()) break;   // the job already ended
    await sleep(100);
  }
  step("running lenses", { lenses: seen.runningLenses });
  step("progress", { text: seen.progress });

  // 3. When the job ends the server asks the client to show the best candidate: a new module opens alone as
  // a plain preview (with Accept / Reject in the title bar), a module that exists as a diff against it.
  const candidate = await waitForCandidate(page, cfg.timeoutsMs.job);
  Object.assign(seen, candidate);
  await shot(page, "03-diff.png");
  step("candidate shown", { view: candidate.candidateView, title: candidate.candidateTitle });

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
    seen.titleArea = (await page.locator(".editor-group-container .title").first().innerHTML().catch(() => "")).slice(0, 6000);
  }
  process.stdout.write(JSON.stringify(seen));
  await browser.close();
  process.exit(1);
}
