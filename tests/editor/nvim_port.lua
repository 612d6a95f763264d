-- Ports a CUDA kernel to MLX from a headless Neovim, through the ksearch language server, as a user
-- of nvim's built-in LSP client would: code lenses, the "Port to MLX" code action, wait for the job,
-- the "Accept" lens, then hover.  Run as `nvim --clean --headless -l nvim_port.lua CONFIG_JSON`;
-- writes what it saw as JSON to the config's `out` path and exits 0, or 1 after writing {error}.
local cfg = vim.json.decode(arg[1])
-- cfg: python, file, root, kernel, kernel_line (1-based), port_title, accept_title, out, timeout_ms

local seen = { steps = {}, jobs = {}, show_diff = {} }
local function step(name) table.insert(seen.steps, name); io.stderr:write("[nvim] " .. name .. "\n") end
local function finish(code)
  local f = assert(io.open(cfg.out, "w"))
  f:write(vim.json.encode(seen))
  f:close()
  os.exit(code)
end
local function fail(msg) seen.error = msg; step("FAILED: " .. msg); finish(1) end
local function wait_for(what, ms, pred)
  local ok = vim.wait(ms, function() return seen.server_exit ~= nil or pred() end, 100)
  if seen.server_exit then
    fail("the server exited (code " .. tostring(seen.server_exit.code) .. ") while waiting for " .. what)
  end
  if not ok then fail("timed out waiting for " .. what) end
end

vim.cmd.edit(vim.fn.fnameescape(cfg.file))
local buf = vim.api.nvim_get_current_buf()
step("opened " .. cfg.file .. " (filetype " .. vim.bo[buf].filetype .. ")")

local client_id = vim.lsp.start({
  name = "ksearch",
  cmd = { cfg.python, "-m", "ksearch_server" },
  root_dir = cfg.root,
  settings = { ksearch = { budget = { evaluations = 3 } } },
  on_exit = function(code, signal)
    seen.server_exit = { code = code, signal = signal }
  end,
  handlers = {
    ["ksearch/jobs"] = function(_, params) table.insert(seen.jobs, params) end,
    ["ksearch/showDiff"] = function(_, params) table.insert(seen.show_diff, params) end,
  },
}, { bufnr = buf })
if not client_id then fail("vim.lsp.start returned nil") end
local client = vim.lsp.get_client_by_id(client_id)
wait_for("the server to initialize", 30000, function() return client.initialized end)
step("server initialized")

local function lens_titles()
  local titles = {}
  for _, lens in ipairs(vim.lsp.codelens.get(buf)) do
    if lens.command then table.insert(titles, lens.command.title) end
  end
  return titles
end
local function find_lens(title)
  for _, lens in ipairs(vim.lsp.codelens.get(buf)) do
    if lens.command and lens.command.title:find(title, 1, true) then return lens end
  end
end

-- 1. The code lenses over the kernel.
wait_for("a '" .. cfg.port_title .. "' code lens", 30000, function()
  vim.lsp.codelens.refresh({ bufnr = buf })
  vim.wait(300)
  return find_lens(cfg.port_title) ~= nil
end)
seen.lenses = lens_titles()
step("code lenses: " .. table.concat(seen.lenses, " | "))

-- 2. The code action at the kernel, applied (apply=true runs it when the filter leaves one).
vim.api.nvim_win_set_cursor(0, { cfg.kernel_line, 0 })
local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
params.context = { diagnostics = {}, triggerKind = 1 }
local reply = client:request_sync("textDocument/codeAction", params, 10000, buf)
if not reply or reply.err then fail("codeAction request failed: " .. vim.inspect(reply and reply.err)) end
seen.actions = {}
for _, a in ipairs(reply.result or {}) do table.insert(seen.actions, a.title) end
step("code actions: " .. table.concat(seen.actions, " | "))
vim.lsp.buf.code_action({
  apply = true,
  filter = function(a) return a.title:find(cfg.port_title, 1, true) ~= nil end,
})
step("port action applied")

-- 3. Wait for the job: a jobs notification that shows it running, then none running or queued.
local function job_done()
  local ran = false
  for _, j in ipairs(seen.jobs) do
    if (j.running or 0) > 0 or (j.queued or 0) > 0 then ran = true end
  end
  local last = seen.jobs[#seen.jobs]
  return ran and last and (last.running or 0) == 0 and (last.queued or 0) == 0
end
wait_for("the port job to finish", cfg.timeout_ms, job_done)
step("job finished; best: " .. tostring(seen.jobs[#seen.jobs].best))

-- 4a. Show diff: Neovim has no ksearch diff view, so the lens runs the server's ksearch.diff, which answers a
-- unified diff and opens it read-only through window/showDocument.
local show
wait_for("a 'Show diff' code lens", 30000, function()
  vim.lsp.codelens.refresh({ bufnr = buf })
  vim.wait(300)
  show = find_lens("Show diff")
  return show ~= nil
end)
seen.show_diff_command = show.command.command
local diff_done = false
client:exec_cmd(show.command, { bufnr = buf }, function(err, result)
  seen.diff_error = err and err.message or nil
  seen.diff = result
  diff_done = true
end)
wait_for("the diff", 30000, function() return diff_done end)
if seen.diff_error then fail("show diff failed: " .. seen.diff_error) end
seen.diff_buffers = {}
for _, b in ipairs(vim.api.nvim_list_bufs()) do
  local name = vim.api.nvim_buf_get_name(b)
  if name:match("%.diff$") then table.insert(seen.diff_buffers, name) end
end
vim.api.nvim_set_current_buf(buf)
step("diff shown: " .. table.concat(seen.diff_buffers, ", "))

-- 4. The Accept lens, run as the lens command.
local accept
wait_for("an '" .. cfg.accept_title .. "' code lens", 30000, function()
  vim.lsp.codelens.refresh({ bufnr = buf })
  vim.wait(300)
  accept = find_lens(cfg.accept_title)
  return accept ~= nil
end)
seen.lenses_after = lens_titles()
step("lenses after the job: " .. table.concat(seen.lenses_after, " | "))
local done = false
client:exec_cmd(accept.command, { bufnr = buf }, function(err, result)
  seen.accept_error = err and err.message or nil
  seen.accept_result = result
  done = true
end)
wait_for("the accept command to answer", 30000, function() return done end)
if seen.accept_error then fail("accept failed: " .. seen.accept_error) end
-- Accept leaves the module saved: no modified buffer is left behind.
seen.modified_after_accept = {}
for _, b in ipairs(vim.api.nvim_list_bufs()) do
  if vim.bo[b].modified then table.insert(seen.modified_after_accept, vim.api.nvim_buf_get_name(b)) end
end
step("accepted")

-- 5. Inlay hints and hover on the kernel line.
vim.lsp.inlay_hint.enable(true, { bufnr = buf })
local hint_params = { textDocument = { uri = vim.uri_from_bufnr(buf) },
  range = { start = { line = 0, character = 0 }, ["end"] = { line = vim.api.nvim_buf_line_count(buf), character = 0 } } }
local hints = client:request_sync("textDocument/inlayHint", hint_params, 10000, buf)
seen.inlay_hints = {}
for _, h in ipairs((hints and hints.result) or {}) do
  local label = h.label
  if type(label) == "table" then
    local parts = {}
    for _, p in ipairs(label) do table.insert(parts, p.value) end
    label = table.concat(parts)
  end
  table.insert(seen.inlay_hints, { line = h.position.line + 1, label = label })
end
step("inlay hints: " .. #seen.inlay_hints)

local line_text = vim.api.nvim_buf_get_lines(buf, cfg.kernel_line - 1, cfg.kernel_line, false)[1]
local col = line_text:find(cfg.kernel, 1, true)
if not col then fail("kernel name not on line " .. cfg.kernel_line) end
local hover = client:request_sync("textDocument/hover", {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  position = { line = cfg.kernel_line - 1, character = col },
}, 10000, buf)
local contents = hover and hover.result and hover.result.contents
if type(contents) == "table" then contents = contents.value or vim.inspect(contents) end
seen.hover = contents or ""
step("hover: " .. #seen.hover .. " characters")
-- 6. Optimize through its lens (3 evaluations), then Reject what it offers, or see that nothing beat the kernel.
local opt = find_lens("Optimize kernel")
if not opt then fail("no 'Optimize kernel' lens: " .. table.concat(lens_titles(), " | ")) end
local opt_done = false
client:exec_cmd(opt.command, { bufnr = buf }, function(err, result)
  seen.optimize_error = err and err.message or nil
  seen.optimize = result
  opt_done = true
end)
wait_for("the optimize job", cfg.timeout_ms, function() return opt_done end)
if seen.optimize_error then fail("optimize failed: " .. seen.optimize_error) end
vim.lsp.codelens.refresh({ bufnr = buf })
vim.wait(500)
seen.lenses_after_optimize = lens_titles()
step("after optimize: " .. table.concat(seen.lenses_after_optimize, " | "))
local reject = find_lens("Reject")
if reject then
  local rej_done = false
  client:exec_cmd(reject.command, { bufnr = buf }, function(err, result)
    seen.reject_error = err and err.message or nil
    seen.reject = result
    rej_done = true
  end)
  wait_for("the reject", 30000, function() return rej_done end)
  vim.lsp.codelens.refresh({ bufnr = buf })
  vim.wait(500)
  seen.lenses_after_reject = lens_titles()
  step("rejected: " .. table.concat(seen.lenses_after_reject, " | "))
end
client:stop()
finish(0)
