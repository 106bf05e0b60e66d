/* tunefleet dashboard: plain JavaScript over /api/v1, no libraries.
 *
 * Every page polls the API while something it shows can still change and stops when it
 * cannot (a task page stops when its task ends). Every request sends the bearer token kept
 * in localStorage (reads need one unless the server opens them; submit, cancel and download
 * a user token); without one the token box opens. Untrusted text (errors,
 * configs, names) only ever enters the page as text nodes.
 */
"use strict";

(() => {
  const API = "/api/v1";
  const FINAL = new Set(["done", "failed", "cancelled"]);
  const TOKEN_KEY = "tunefleet.token";
  const TRIAL_STATUSES = ["ok", "compile_error", "runtime_error", "wrong_answer", "timeout", "worker_lost",
    "unsupported_target", "queued", "running"];
  const FAILED_TRIAL = new Set(["compile_error", "runtime_error", "wrong_answer", "timeout", "worker_lost",
    "unsupported_target"]);
  const POLL_ACTIVE_MS = 1500;
  const POLL_IDLE_MS = 10000;
  const POLL_WORKERS_MS = 3000;

  // ---------------------------------------------------------------- DOM helpers

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.setAttribute("class", value);
      else if (key === "text") el.textContent = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? "" : String(value));
    }
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  const $ = (id) => document.getElementById(id);
  const replace = (el, ...children) => { el.replaceChildren(); append(el, children); };

  // ---------------------------------------------------------------- formatting

  function fmtNumber(x, digits = 3) {
    if (x === null || x === undefined || !isFinite(x)) return "—";
    const abs = Math.abs(x);
    if (abs >= 1000) return Math.round(x).toLocaleString("en-US");
    if (abs >= 100) return x.toFixed(0);
    if (abs >= 10) return x.toFixed(1);
    if (abs >= 1) return x.toFixed(2);
    return x.toPrecision(digits);
  }

  const fmtGflops = (g) => (g === null || g === undefined ? "—" : `${fmtNumber(g)} GFLOP/s`);

  function fmtLatency(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "—";
    if (sec < 1e-3) return `${fmtNumber(sec * 1e6)} µs`;
    if (sec < 1) return `${fmtNumber(sec * 1e3)} ms`;
    return `${fmtNumber(sec)} s`;
  }

  // A latency with the disturbance of its measurement (a fraction: 0 undisturbed, 1 about half
  // the measuring CPUs' time taken by other work), when the server reports one.
  function fmtMeasured(sec, disturbance) {
    const text = fmtLatency(sec);
    if (disturbance === null || disturbance === undefined || text === "—") return text;
    return `${text} · disturbance ${disturbance.toFixed(2)}`;
  }

  function fmtDuration(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "—";
    sec = Math.max(0, sec);
    if (sec < 60) return `${Math.floor(sec)} s`;
    const m = Math.floor(sec / 60);
    if (m < 60) return `${m} min ${String(Math.floor(sec % 60)).padStart(2, "0")} s`;
    const hr = Math.floor(m / 60);
    if (hr < 48) return `${hr} h ${String(m % 60).padStart(2, "0")} min`;
    return `${Math.floor(hr / 24)} d ${hr % 24} h`;
  }

  const fmtAgo = (iso) => (iso ? `${fmtDuration((serverNow() - Date.parse(iso)) / 1000)} ago` : "—");

  function fmtBytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} kB`;
    return `${(n / 1024 / 1024).toFixed(1)} MB`;
  }

  function fmtValue(v) {
    if (Array.isArray(v)) return `[${v.map(fmtValue).join(", ")}]`;
    if (v !== null && typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  /** A config's knobs as [name, value] pairs: the tuner stores {index, knobs: {...}}; any
   * other shape is shown as it is. */
  function configEntries(config) {
    const out = [];
    for (const [k, v] of Object.entries(config || {})) {
      if (k === "knobs" && v && typeof v === "object" && !Array.isArray(v)) out.push(...Object.entries(v));
      else if (k !== "index") out.push([k, v]);
    }
    return out;
  }

  const fmtConfig = (config) => configEntries(config).map(([k, v]) => `${k}=${fmtValue(v)}`).join("  ");
  const humanStatus = (status) => String(status).replaceAll("_", " ");

  /** "M=32 N=16 K=8 relu": the shapes of a workload, and its options where they differ
   * from the operator's defaults (when the operator list is known). */
  function workloadSummary(workload, ops) {
    const args = (workload && workload.args) || {};
    const spec = ops && ops.get(workload.op);
    const defaults = new Map(((spec && spec.args) || []).map((a) => [a.name, a]));
    const parts = [];
    for (const [name, value] of Object.entries(args)) {
      if (value === null || value === undefined) continue;
      const arg = defaults.get(name);
      const type = arg ? arg.type : (Number.isInteger(value) ? "int" : typeof value);
      if (type === "json" || (typeof value === "object" && !Array.isArray(value))) {
        parts.push(name === "te" ? "custom computation" : `${name}: given`);
      } else if (type === "int" || type === "int2" || Number.isInteger(value)) {
        if (type === "int2" && arg && JSON.stringify(value) === JSON.stringify(arg.default)) continue;
        parts.push(`${name}=${fmtValue(value)}`);
      } else if (typeof value === "boolean") {
        if (value) parts.push(name);
      } else if (!arg || JSON.stringify(value) !== JSON.stringify(arg.default)) {
        parts.push(arg && arg.choices ? String(value) : `${name}=${value}`);
      }
    }
    return parts.join(" ");
  }

  // ---------------------------------------------------------------- clock, token, API

  let clockOffsetMs = 0; // server clock minus browser clock
  const serverNow = () => Date.now() + clockOffsetMs;

  function noteServerTime(ms, precise) {
    if (!isFinite(ms)) return;
    const offset = ms - Date.now();
    // The Date header has whole seconds (and servers cache it): only a skew of several
    // seconds between the two machines moves the clock.
    if (precise || Math.abs(offset - clockOffsetMs) > 3000) clockOffsetMs = offset;
  }

  function getToken() {
    try { return localStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
  }

  function setToken(value) {
    try {
      if (value) localStorage.setItem(TOKEN_KEY, value);
      else localStorage.removeItem(TOKEN_KEY);
    } catch { /* storage disabled: the token lasts for this page only */ }
    showTokenState();
  }

  const authHeaders = () => (getToken() ? { Authorization: `Bearer ${getToken()}` } : {});

  class HttpError extends Error {
    constructor(status, detail) {
      super(typeof detail === "string" ? detail : `HTTP ${status}`);
      this.status = status;
      this.detail = detail;
    }
  }

  async function api(path, { method = "GET", body, raw = false } = {}) {
    const headers = { Accept: "application/json", ...authHeaders() };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(API + path, {
        method, headers, cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new HttpError(0, "cannot reach the tunefleet server");
    }
    const date = response.headers.get("date");
    if (date) noteServerTime(Date.parse(date), false);
    if (raw && response.ok) return response;
    const text = await response.text();
    let data = text;
    try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (!response.ok) {
      if (response.status === 401 && !getToken()) openTokenBox();
      throw new HttpError(response.status, data && typeof data === "object" && "detail" in data ? data.detail : data);
    }
    return data;
  }

  /** A message for a failed request, pointing at the token box when the token is the problem. */
  function errorText(err) {
    if (!(err instanceof HttpError)) return String(err && err.message ? err.message : err);
    if (err.status === 401) {
      return getToken()
        ? `The server refused the token (${err.detail}). Set a valid user token under Token (top right).`
        : "This needs a user token: set one under Token (top right).";
    }
    if (err.status === 403) return `${err.detail} Set a user token under Token (top right).`;
    if (Array.isArray(err.detail)) {
      return err.detail.map((e) => `${fieldKey(e.loc) || "request"}: ${e.msg}`).join("; ");
    }
    return typeof err.detail === "string" ? err.detail : `HTTP ${err.status}`;
  }

  const fieldKey = (loc) => (loc || []).filter((p) => p !== "body" && p !== "query" && p !== "path").join(".");

  function openTokenBox() {
    const box = $("token-box");
    if (box) { box.open = true; $("token-input").focus(); }
  }

  function showTokenState() {
    const box = $("token-box");
    if (!box) return;
    const has = Boolean(getToken());
    box.dataset.set = has ? "1" : "0";
    $("token-summary").textContent = has ? "Token ✓" : "Token";
  }

  function setupToken() {
    const form = $("token-form");
    if (!form) return;
    $("token-input").value = getToken();
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      setToken($("token-input").value.trim());
      $("token-box").open = false;
    });
    $("token-clear").addEventListener("click", () => {
      $("token-input").value = "";
      setToken("");
    });
    showTokenState();
  }

  // ---------------------------------------------------------------- polling

  function setLive(state, text) {
    const el = $("live-state");
    if (!el) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  /** Calls `fn` now and again after the delay it returns (ms; null stops). Errors retry
   * after 5 s. `poke()` runs it at once; overlapping calls are merged. */
  function poller(fn) {
    let timer = null;
    let running = false;
    let again = false;
    let stopped = false;
    async function tick() {
      clearTimeout(timer);
      timer = null;
      if (stopped) return;
      if (running) { again = true; return; }
      running = true;
      let next = null;
      try {
        next = await fn();
      } catch (err) {
        setLive("error", `Connection problem (${errorText(err)}); retrying`);
        next = 5000;
      }
      running = false;
      if (stopped) return;
      if (again) { again = false; tick(); return; }
      if (next !== null && next !== undefined) {
        timer = setTimeout(tick, document.hidden ? Math.max(next, 5000) : next);
      }
    }
    tick();
    return { poke: tick, stop() { stopped = true; clearTimeout(timer); } };
  }

  function timing(task) {
    const now = serverNow();
    const start = task.started_at ? Date.parse(task.started_at) : null;
    const end = task.finished_at ? Date.parse(task.finished_at) : null;
    const elapsed = start !== null ? ((end ?? now) - start) / 1000 : null;
    const budget = task.budget || {};
    let remaining = null;
    let remainingText = "—";
    if (FINAL.has(task.status)) {
      remainingText = "finished";
    } else if (task.status === "exporting") {
      remainingText = "building artifact";
    } else if (start === null) {
      remainingText = task.status === "waiting_for_worker" ? "waiting for a worker" : "not started";
    } else {
      if (task.trials_done > 0) {
        remaining = Math.max(0, (budget.trials - task.trials_done) * (elapsed / task.trials_done));
      }
      if (budget.wall_time_s) {
        const left = Math.max(0, budget.wall_time_s - elapsed);
        remaining = remaining === null ? left : Math.min(remaining, left);
      }
      if (remaining === null) remainingText = "estimating…";
      else remainingText = `${budget.early_stopping ? "≤ " : "~"}${fmtDuration(remaining)}`;
    }
    return { elapsed, elapsedText: start === null ? "not started" : fmtDuration(elapsed), remaining, remainingText };
  }

  const badge = (status) => h("span", { class: "badge", "data-status": status, text: humanStatus(status) });

  // ---------------------------------------------------------------- tasks page

  async function tasksPage() {
    const state = {
      limit: 25, offset: 0, ops: new Map(), workers: [], deviceKeys: new Set(),
      status: "", deviceKey: "", last: null, formReady: false,
    };
    const params = new URLSearchParams(location.search);
    state.status = params.get("status") || "";
    state.deviceKey = params.get("device_key") || "";
    state.offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
    $("filter-status").value = state.status;
    if (state.deviceKey) state.deviceKeys.add(state.deviceKey);
    fillDeviceFilter(state);

    const syncUrl = () => {
      const q = new URLSearchParams();
      if (state.status) q.set("status", state.status);
      if (state.deviceKey) q.set("device_key", state.deviceKey);
      if (state.offset) q.set("offset", state.offset);
      history.replaceState(null, "", q.toString() ? `/?${q}` : "/");
    };
    $("filter-status").addEventListener("change", (ev) => { state.status = ev.target.value; state.offset = 0; syncUrl(); poll.poke(); });
    $("filter-device").addEventListener("change", (ev) => { state.deviceKey = ev.target.value; state.offset = 0; syncUrl(); poll.poke(); });
    $("page-newer").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); syncUrl(); poll.poke(); });
    $("page-older").addEventListener("click", () => { state.offset += state.limit; syncUrl(); poll.poke(); });

    const poll = poller(async () => {
      const q = new URLSearchParams({ limit: state.limit, offset: state.offset });
      if (state.status) q.set("status", state.status);
      if (state.deviceKey) q.set("device_key", state.deviceKey);
      const page = await api(`/tasks?${q}`);
      state.last = page;
      for (const t of page.items) state.deviceKeys.add(t.device_key);
      fillDeviceFilter(state);
      renderTasks(state);
      const modelsActive = await renderModelsPanel().catch(() => false);
      const active = modelsActive || page.items.some((t) => !FINAL.has(t.status));
      setLive("live", active
        ? `Live: updating every ${POLL_ACTIVE_MS / 1000} s while tasks run`
        : `Live: checking for new tasks every ${POLL_IDLE_MS / 1000} s`);
      return active ? POLL_ACTIVE_MS : POLL_IDLE_MS;
    });

    // What the form and the filters need; each part is optional for the table.
    const [ops, targets, openapi, workers, keys] = await Promise.allSettled([
      api("/ops"), api("/targets"), fetch("/openapi.json").then((r) => r.json()),
      api("/workers?limit=500"), api("/tasks?limit=500"),
    ]);
    if (workers.status === "fulfilled") {
      state.workers = workers.value.items;
      for (const w of state.workers) state.deviceKeys.add(w.device_key);
    }
    if (keys.status === "fulfilled") for (const t of keys.value.items) state.deviceKeys.add(t.device_key);
    fillDeviceFilter(state);
    if (ops.status === "fulfilled") {
      for (const op of ops.value) state.ops.set(op.name, op);
      buildSubmitForm(state, {
        targets: targets.status === "fulfilled" ? targets.value : [],
        schemas: openapi.status === "fulfilled" ? openapi.value.components.schemas : {},
        onSubmitted: () => poll.poke(),
      });
      if (state.last) renderTasks(state);
    } else {
      replace($("form-msg"), `Cannot load the operator list: ${errorText(ops.reason)}`);
      $("form-msg").className = "form-msg error";
    }
  }

  function fillDeviceFilter(state) {
    const select = $("filter-device");
    const keys = [...state.deviceKeys].sort();
    const current = [...select.options].map((o) => o.value).slice(1);
    if (JSON.stringify(keys) !== JSON.stringify(current)) {
      replace(select, h("option", { value: "", text: "all" }), keys.map((k) => h("option", { value: k, text: k })));
    }
    select.value = state.deviceKey;
    const list = $("device-key-options");
    if (list) replace(list, keys.map((k) => h("option", { value: k })));
  }

  function renderTasks(state) {
    const page = state.last;
    const body = $("tasks-body");
    const filtered = Boolean(state.status || state.deviceKey);
    $("tasks-count").textContent = page.total === 1 ? "1 task" : `${page.total} tasks`;
    const pager = $("tasks-pager");
    pager.hidden = page.total <= page.limit && page.offset === 0;
    $("page-newer").disabled = page.offset === 0;
    $("page-older").disabled = page.offset + page.items.length >= page.total;
    $("page-label").textContent = page.items.length
      ? `${page.offset + 1}–${page.offset + page.items.length} of ${page.total}` : "";

    if (!page.items.length) {
      if (filtered || page.offset) {
        replace(body, h("div", { class: "empty", id: "tasks-empty" },
          h("strong", { text: "No tasks match these filters." }),
          h("button", {
            class: "btn", type: "button", text: "Show all tasks",
            onclick: () => { location.href = "/"; },
          })));
      } else {
        replace(body, h("div", { class: "empty", id: "tasks-empty" },
          h("strong", { text: "No tasks yet." }),
          h("p", { text: "Submit one with the form above, or from a shell:" }),
          h("pre", { class: "code", text: "tunefleet submit matmul -a M=256 -a N=256 -a K=256 --device-key cpu-local --trials 64" })));
        const details = $("submit-details");
        if (details && !details.dataset.touched) details.open = true;
      }
      return;
    }

    const rows = page.items.map((t) => {
      const time = timing(t);
      const share = t.budget.trials ? Math.min(1, t.trials_done / t.budget.trials) : 0;
      const bar = h("div");
      bar.style.width = `${(share * 100).toFixed(1)}%`;
      return h("tr", { "data-task-id": t.id, "data-status": t.status },
        h("td", { class: "first", "data-label": "Task" },
          h("div", {},
            h("a", { class: "task-link", href: `/tasks/${t.id}`, text: `#${t.id}` }), " ",
            h("span", { class: "op-name", text: t.op }),
            h("div", { class: "shape", text: workloadSummary(t.workload, state.ops) }))),
        h("td", { "data-label": "Target", class: "mono nowrap", text: t.target }),
        h("td", { "data-label": "Device key", class: "mono nowrap", text: t.device_key }),
        h("td", { "data-label": "Status" }, badge(t.status)),
        h("td", { "data-label": "Trials", class: "num trials" },
          h("div", {},
            h("span", { class: "trials-done", text: `${t.trials_done} / ${t.budget.trials}` }),
            h("div", { class: "mini-progress" }, bar))),
        h("td", { "data-label": "Best GFLOP/s", class: "num best-gflops", text: fmtNumber(t.best_gflops) }),
        h("td", { "data-label": "Best latency", class: "num", text: fmtLatency(t.best_latency_s) }),
        h("td", { "data-label": "Elapsed", class: "num", text: time.elapsedText }),
        h("td", { "data-label": "Remaining", class: "num", text: time.remainingText }));
    });
    replace(body, h("table", { class: "data cards", id: "tasks-table" },
      h("thead", {}, h("tr", {},
        h("th", { text: "Task" }), h("th", { text: "Target" }), h("th", { text: "Device key" }),
        h("th", { text: "Status" }), h("th", { class: "num", text: "Trials" }),
        h("th", { class: "num", text: "Best GFLOP/s" }), h("th", { class: "num", text: "Best latency" }),
        h("th", { class: "num", text: "Elapsed" }), h("th", { class: "num", text: "Remaining" }))),
      h("tbody", {}, rows)));
  }

  // ---------------------------------------------------------------- the submit form

  /** A field spec from a JSON schema property of the API (Budget, Protocol). */
  function specFromSchema(key, name, prop) {
    let p = prop;
    let nullable = false;
    if (prop.anyOf) {
      nullable = prop.anyOf.some((x) => x.type === "null");
      p = { ...prop, ...prop.anyOf.find((x) => x.type !== "null") };
    }
    const type = { integer: "int", number: "float", boolean: "bool", string: "str" }[p.type] || "str";
    const label = name.replaceAll("_", " ").replace(/ s$/, " (s)").replace(/ ms$/, " (ms)");
    return {
      key, name, label, type, nullable, required: false,
      default: p.default === undefined ? null : p.default,
      min: p.minimum ?? null, max: p.maximum ?? null, exclusiveMin: p.exclusiveMinimum ?? null,
      choices: p.enum || null, description: p.description || "",
    };
  }

  /** A field spec from an operator argument of GET /ops. */
  function specFromArg(arg) {
    return {
      key: `args.${arg.name}`, name: arg.name, label: arg.name, type: arg.type,
      nullable: !arg.required, required: arg.required, default: arg.default,
      min: arg.min, max: arg.max, exclusiveMin: null, choices: arg.choices, description: arg.description,
    };
  }

  function makeField(spec) {
    const id = `f-${spec.key.replaceAll(".", "-")}`;
    const field = h("div", { class: `field${spec.type === "json" ? " json" : ""}${spec.type === "bool" ? " check" : ""}`, "data-field": spec.key });
    const numberAttrs = (type) => ({
      type: "number", step: type === "float" ? "any" : "1",
      min: spec.exclusiveMin ?? spec.min, max: spec.max, inputmode: type === "float" ? "decimal" : "numeric",
    });
    let control;
    if (spec.type === "bool") {
      control = h("input", { type: "checkbox", id, name: spec.key });
      control.checked = Boolean(spec.default);
      field.append(h("label", {}, control, spec.label));
    } else {
      field.append(h("label", { for: id, text: spec.label + (spec.required ? " *" : "") }));
      if (spec.choices) {
        control = h("select", { id, name: spec.key }, spec.choices.map((c) => h("option", { value: c, text: c })));
        if (spec.default !== null && spec.default !== undefined) control.value = spec.default;
      } else if (spec.type === "int" || spec.type === "float") {
        control = h("input", { id, name: spec.key, ...numberAttrs(spec.type) });
        if (spec.default !== null && spec.default !== undefined) control.value = spec.default;
        else if (spec.nullable) control.placeholder = "none";
      } else if (spec.type === "int2") {
        const d = Array.isArray(spec.default) ? spec.default : [spec.default, spec.default];
        const a = h("input", { id, name: `${spec.key}.0`, "aria-label": `${spec.name} (first)`, ...numberAttrs("int") });
        const b = h("input", { name: `${spec.key}.1`, "aria-label": `${spec.name} (second)`, ...numberAttrs("int") });
        if (d[0] !== null && d[0] !== undefined) { a.value = d[0]; b.value = d[1]; }
        control = h("div", { class: "pair" }, a, b);
      } else if (spec.type === "json") {
        control = h("textarea", { id, name: spec.key, spellcheck: "false", placeholder: spec.required ? "JSON" : "JSON (optional)" });
      } else {
        control = h("input", { id, name: spec.key, spellcheck: "false" });
        if (spec.default !== null && spec.default !== undefined) control.value = spec.default;
      }
      field.append(control);
    }
    const bounds = [];
    if (spec.min !== null && spec.min !== undefined) bounds.push(`≥ ${spec.min}`);
    if (spec.exclusiveMin !== null && spec.exclusiveMin !== undefined) bounds.push(`> ${spec.exclusiveMin}`);
    if (spec.max !== null && spec.max !== undefined) bounds.push(`≤ ${spec.max}`);
    const hint = [spec.description, bounds.join(", ")].filter(Boolean).join(" · ");
    if (hint && spec.type !== "bool") field.append(h("p", { class: "hint", text: hint }));
    field.append(h("p", { class: "err", role: "alert" }));
    field._spec = spec;
    return field;
  }

  /** Reads a field: {skip} when left empty (the API's default applies), else {value} or {error}. */
  function readField(field) {
    const spec = field._spec;
    const controls = field.querySelectorAll("input, select, textarea");
    const checkNumber = (raw, type) => {
      const n = Number(raw);
      if (raw.trim() === "" || !isFinite(n)) return { error: `must be ${type === "float" ? "a number" : "an integer"}` };
      if (type !== "float" && !Number.isInteger(n)) return { error: "must be an integer" };
      if (spec.min !== null && spec.min !== undefined && n < spec.min) return { error: `must be >= ${spec.min}` };
      if (spec.exclusiveMin !== null && spec.exclusiveMin !== undefined && n <= spec.exclusiveMin) return { error: `must be > ${spec.exclusiveMin}` };
      if (spec.max !== null && spec.max !== undefined && n > spec.max) return { error: `must be <= ${spec.max}` };
      return { value: n };
    };
    if (spec.type === "bool") return { value: controls[0].checked };
    if (spec.choices) return { value: controls[0].value };
    if (spec.type === "int2") {
      const [a, b] = [controls[0].value, controls[1].value];
      if (a.trim() === "" && b.trim() === "") return spec.required ? { error: "required" } : { skip: true };
      const first = checkNumber(a, "int");
      const second = checkNumber(b, "int");
      if (first.error || second.error) return { error: first.error || second.error };
      return { value: [first.value, second.value] };
    }
    const raw = controls[0].value;
    if (raw.trim() === "") return spec.required ? { error: "required" } : { skip: true };
    if (spec.type === "int" || spec.type === "float") return checkNumber(raw, spec.type);
    if (spec.type === "json") {
      try { return { value: JSON.parse(raw) }; } catch (err) { return { error: `not valid JSON: ${err.message}` }; }
    }
    return { value: raw.trim() };
  }

  function buildSubmitForm(state, { targets, schemas, onSubmitted }) {
    const form = $("submit-form");
    const opSelect = $("op-select");
    const details = $("submit-details");
    details.addEventListener("toggle", () => { details.dataset.touched = "1"; });
    const names = [...state.ops.keys()].sort();
    replace(opSelect, names.map((n) => h("option", { value: n, text: `${n} — ${state.ops.get(n).family}` })));
    opSelect.value = state.ops.has("matmul") ? "matmul" : names[0];

    // Left empty, the target is the best one the device key's hosts execute (the API decides).
    const targetOptions = (op) => {
      const out = [];
      for (const t of targets) {
        if (op && !op.targets.includes(t.kind)) continue;
        out.push(t.kind);
        for (const p of t.pools || []) out.push(p.default);
        for (const v of t.values || []) out.push(`${t.kind} -${t.option}=${v}`);
      }
      return [...new Set(out)];
    };

    const renderArgs = () => {
      const op = state.ops.get(opSelect.value);
      $("op-description").textContent = op ? op.description : "";
      replace($("args-fields"), op ? op.args.map((a) => makeField(specFromArg(a))) : []);
      if (op && !op.args.length) $("args-fields").append(h("p", { class: "hint", text: "This operator takes no arguments." }));
      replace($("target-options"), targetOptions(op).map((t) => h("option", { value: t })));
      const target = $("target-input");
      const kind = target.value.trim().split(/\s+/)[0];
      if (target.value && op && !op.targets.includes(kind)) target.value = "";
      clearErrors(form);
    };
    opSelect.addEventListener("change", renderArgs);
    renderArgs();

    // The API may pick the device key itself (the one pool of live workers of the target's kind).
    const create = schemas.TaskCreate || {};
    const deviceKeyRequired = !create.properties || (create.required || []).includes("device_key");
    if (!deviceKeyRequired) {
      $("device-key-input").required = false;
      $("device-key-input").placeholder = "the one live pool";
    }
    if (!$("device-key-input").value) {
      const first = state.workers.find((w) => w.state !== "lost") || state.workers[0];
      if (first) $("device-key-input").value = first.device_key;
    }
    const fromSchema = (schemaName, group) => {
      const schema = schemas[schemaName];
      if (!schema) return [];
      return Object.entries(schema.properties).map(([name, prop]) =>
        makeField(specFromSchema(`${group}.${name}`, name, prop)));
    };
    replace($("budget-fields"), fromSchema("Budget", "budget"));
    replace($("protocol-fields"), fromSchema("Protocol", "protocol"));
    for (const field of form.querySelectorAll("[data-field]")) {
      field.addEventListener("input", () => setFieldError(form, field.dataset.field, ""));
    }

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      clearErrors(form);
      const body = { op: opSelect.value, args: {}, budget: {}, protocol: {} };
      let invalid = false;
      for (const field of form.querySelectorAll("[data-field]")) {
        if (!field._spec) continue;
        const result = readField(field);
        if (result.error) { setFieldError(form, field._spec.key, result.error); invalid = true; continue; }
        if (result.skip) continue;
        const [group, name] = field._spec.key.split(".");
        body[group][name] = result.value;
      }
      const target = $("target-input").value.trim();
      if (target) body.target = target;
      const deviceKey = $("device-key-input").value.trim();
      if (deviceKey) body.device_key = deviceKey;
      body.reuse = $("reuse-input").checked;
      if (!deviceKey && deviceKeyRequired) { setFieldError(form, "device_key", "required"); invalid = true; }
      else if (deviceKey && !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(deviceKey)) {
        setFieldError(form, "device_key", "letters, digits, '.', '_' and '-', starting with a letter or digit");
        invalid = true;
      }
      const msg = $("form-msg");
      if (invalid) {
        msg.className = "form-msg error";
        msg.textContent = "Fix the marked fields.";
        form.querySelector("[aria-invalid='true']")?.focus();
        return;
      }
      const button = $("submit-button");
      button.disabled = true;
      msg.className = "form-msg";
      msg.textContent = "Submitting…";
      try {
        const task = await api("/tasks", { method: "POST", body });
        msg.className = "form-msg ok";
        replace(msg, `Submitted task #${task.id} (${humanStatus(task.status)}). `,
          h("a", { href: `/tasks/${task.id}`, id: "submitted-link", text: "Watch it →" }));
        onSubmitted(task);
      } catch (err) {
        msg.className = "form-msg error";
        if (err.status === 422 && Array.isArray(err.detail)) {
          const unplaced = [];
          for (const e of err.detail) {
            const key = fieldKey(e.loc);
            // The operator library names the argument first ("KH: ..."); next to it, that is noise.
            const name = key.slice(key.lastIndexOf(".") + 1);
            const text = name && String(e.msg).startsWith(`${name}: `) ? String(e.msg).slice(name.length + 2) : e.msg;
            if (!setFieldError(form, key, text)) unplaced.push(`${key || "request"}: ${e.msg}`);
          }
          msg.textContent = unplaced.length
            ? `The server refused the task: ${unplaced.join("; ")}`
            : "The server refused the task: see the marked fields.";
          form.querySelector("[aria-invalid='true']")?.focus();
        } else {
          msg.textContent = errorText(err);
          if (err.status === 401 || err.status === 403) openTokenBox();
        }
      } finally {
        button.disabled = false;
      }
    });
  }

  /** Shows `message` under the field at `key` (e.g. "args.M", "budget.trials"), or under
   * the nearest enclosing field or group; false when there is none on the form. */
  function setFieldError(form, key, message) {
    let k = key;
    while (k) {
      const field = form.querySelector(`[data-field="${CSS.escape(k)}"]`);
      const groupErr = form.querySelector(`[data-field-err="${CSS.escape(k)}"]`);
      if (field || groupErr) {
        const slot = field ? field.querySelector(".err") : groupErr;
        slot.textContent = message;
        if (field) for (const c of field.querySelectorAll("input, select, textarea")) {
          if (message) c.setAttribute("aria-invalid", "true"); else c.removeAttribute("aria-invalid");
        }
        return true;
      }
      k = k.includes(".") ? k.slice(0, k.lastIndexOf(".")) : "";
    }
    return false;
  }

  function clearErrors(form) {
    for (const e of form.querySelectorAll(".err")) e.textContent = "";
    for (const c of form.querySelectorAll("[aria-invalid]")) c.removeAttribute("aria-invalid");
  }

  // ---------------------------------------------------------------- task page

  async function taskPage() {
    const id = Number(document.body.dataset.taskId);
    const state = { id, ops: new Map(), header: null, headerFor: null, progress: null };
    api("/ops").then((ops) => { for (const op of ops) state.ops.set(op.name, op); if (state.progress) renderTask(state); }).catch(() => {});
    setupTaskActions(state, () => poll.poke());
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => state.progress && drawCharts(state.progress), 150);
    });

    const poll = poller(async () => {
      let progress;
      try {
        progress = await api(`/tasks/${id}/progress`);
      } catch (err) {
        if (err.status === 404) {
          $("task-view").hidden = true;
          const missing = $("task-missing");
          missing.hidden = false;
          replace(missing, h("strong", { text: `Task #${id} does not exist.` }),
            h("p", {}, h("a", { href: "/", text: "See all tasks" })));
          setLive("idle", "Nothing to update");
          return null;
        }
        throw err;
      }
      noteServerTime(Date.parse(progress.now), true);
      state.progress = progress;
      const task = progress.task;
      if (task.artifact && state.headerFor !== task.artifact.sha256) {
        try {
          state.header = await api(`/tasks/${id}/artifact/header`);
          state.headerFor = task.artifact.sha256;
        } catch (err) {
          state.header = { error: errorText(err) };
        }
      }
      $("task-view").hidden = false;
      renderTask(state);
      if (FINAL.has(task.status)) {
        setLive("idle", `Task ${humanStatus(task.status)}: updates stopped`);
        return null;
      }
      setLive("live", `Live: updating every ${POLL_ACTIVE_MS / 1000} s while the task runs`);
      return POLL_ACTIVE_MS;
    });
    // Keeps the elapsed time moving between polls.
    setInterval(() => { if (state.progress && !FINAL.has(state.progress.task.status)) renderStats(state); }, 1000);
  }

  function setupTaskActions(state, refresh) {
    const msg = $("action-msg");
    const say = (text, kind) => { msg.className = `action-msg ${kind || ""}`; replace(msg, text); };
    setupCancel(`/tasks/${state.id}/cancel`, "Task", say, refresh);
    $("download-button").addEventListener("click", () =>
      saveDownload(`/tasks/${state.id}/artifact`, `tunefleet-task-${state.id}.tar.gz`, say));
  }

  /** The cancel button (macros.html's cancel_buttons): asks to confirm, then POSTs `path`;
   * `noun` names what is cancelled in the message, `say` reports, `refresh` re-polls. */
  function setupCancel(path, noun, say, refresh) {
    const cancel = $("cancel-button");
    const confirm = $("cancel-confirm");
    cancel.addEventListener("click", () => { cancel.hidden = true; confirm.hidden = false; $("cancel-yes").focus(); });
    $("cancel-no").addEventListener("click", () => { confirm.hidden = true; cancel.hidden = false; });
    $("cancel-yes").addEventListener("click", async () => {
      confirm.hidden = true;
      say("Cancelling…");
      try {
        await api(path, { method: "POST" });
        say(`${noun} cancelled.`, "ok");
      } catch (err) {
        cancel.hidden = false;
        say(errorText(err), "error");
        if (err.status === 401 || err.status === 403) openTokenBox();
      }
      refresh();
    });
  }

  /** Shows the cancel button while `status` is not final (unless its confirmation is open). */
  function showCancel(status) {
    if (FINAL.has(status)) { $("cancel-button").hidden = true; $("cancel-confirm").hidden = true; }
    else if ($("cancel-confirm").hidden) $("cancel-button").hidden = false;
  }

  /** Fetch `path` (an archive the API publishes with X-Content-SHA256), check its digest and
   * hand it to the browser as a file (`fallbackName` unless the response names one); `say`
   * reports progress and errors. */
  async function saveDownload(path, fallbackName, say) {
    const button = $("download-button");
    button.disabled = true;
    say("Downloading…");
    try {
      // 202: a worker is building it (a model's bundle); ask again after Retry-After, 10 minutes at most
      const deadline = Date.now() + 600000;
      let response = await api(path, { raw: true });
      while (response.status === 202) {
        const building = await response.json();
        const waitS = Number(response.headers.get("retry-after")) || building.retry_after_s || 2;
        if (Date.now() + 1000 * waitS > deadline) throw new Error(`still being built by a worker (${building.state}) after 10 minutes; try again later`);
        say(`Being built by a worker (${building.state})…`);
        await new Promise((resolve) => setTimeout(resolve, 1000 * waitS));
        response = await api(path, { raw: true });
      }
      const blob = await response.blob();
      const expected = response.headers.get("x-content-sha256");
      const disposition = response.headers.get("content-disposition") || "";
      const match = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
      const name = match ? decodeURIComponent(match[1]) : fallbackName;
      let check = "";
      if (expected && window.crypto && crypto.subtle) {
        const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
        const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
        if (hex !== expected) throw new Error(`the download is corrupt: sha256 ${hex}, the server published ${expected}`);
        check = ` (sha256 ${hex.slice(0, 12)}… verified)`;
      }
      const url = URL.createObjectURL(blob);
      const link = h("a", { href: url, download: name });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      say(`Saved ${name}, ${fmtBytes(blob.size)}${check}.`, "ok");
    } catch (err) {
      say(errorText(err), "error");
      if (err.status === 401 || err.status === 403) openTokenBox();
    } finally {
      button.disabled = false;
    }
  }

  function renderTask(state) {
    const p = state.progress;
    const t = p.task;
    document.title = `Task ${t.id} · ${t.op} · ${humanStatus(t.status)} · tunefleet`;
    const status = $("task-status");
    status.dataset.status = t.status;
    status.textContent = humanStatus(t.status);
    replace($("task-workload"), h("span", { class: "op-name", text: t.op }), " ",
      h("span", { class: "mono", text: workloadSummary(t.workload, state.ops) }));
    const error = $("task-error");
    error.hidden = !t.error;
    error.textContent = t.error || "";
    showCancel(t.status);
    const download = $("download-button");
    download.hidden = !t.artifact;
    if (t.artifact) download.textContent = `Download artifact (${fmtBytes(t.artifact.size)})`;
    renderStats(state);
    drawCharts(p);
    renderCounts(p);
    renderBest(p);
    renderTop(p);
    renderPrototype(state);
    $("task-json").textContent = JSON.stringify({
      workload: t.workload, workload_key: t.workload_key, flop: t.flop, target: t.target,
      device_key: t.device_key, budget: t.budget, protocol: t.protocol, reuse: t.reuse,
    }, null, 2);
  }

  function renderStats(state) {
    const t = state.progress.task;
    const time = timing(t);
    const stat = (label, value, id) => h("div", {}, h("dt", { text: label }), h("dd", { id, text: value }));
    replace($("task-stats"),
      stat("Trials", `${t.trials_done} / ${t.budget.trials}`, "stat-trials"),
      stat("Best", fmtGflops(t.best_gflops), "stat-gflops"),
      stat("Best latency", fmtMeasured(t.best_latency_s, t.best_disturbance), "stat-latency"),
      stat("Elapsed", time.elapsedText, "stat-elapsed"),
      stat("Remaining", time.remainingText, "stat-remaining"),
      stat("Target", t.target, "stat-target"),
      stat("Device key", t.device_key, "stat-device"),
      stat("Submitted", fmtAgo(t.created_at), "stat-created"));
    const share = t.budget.trials ? Math.min(1, t.trials_done / t.budget.trials) : 0;
    $("task-progress-bar").style.width = `${(FINAL.has(t.status) && t.status === "done" ? 1 : share) * 100}%`;
  }

  function renderCounts(p) {
    const present = TRIAL_STATUSES.filter((st) => p.counts[st] > 0);
    const box = $("status-counts");
    if (!present.length) {
      replace(box, h("p", { class: "hint", text: "No trials yet." }));
    } else {
      replace(box, h("div", { class: "chips" }, TRIAL_STATUSES.filter((st) => st === "ok" || p.counts[st] > 0).map((st) =>
        h("span", { class: `chip s-${st}`, "data-status": st, "data-zero": p.counts[st] ? "0" : "1" },
          `${humanStatus(st)} `, h("b", { text: p.counts[st] })))));
    }
    const errors = $("last-errors");
    if (!p.errors.length) {
      replace(errors, h("p", { class: "hint", text: present.some((st) => FAILED_TRIAL.has(st)) ? "Failed trials left no error text." : "No failed trials." }));
      return;
    }
    replace(errors, p.errors.map((e) => h("div", { class: `error-item s-${e.status}` },
      h("div", { class: "meta" }, `trial #${e.trial_id} · ${humanStatus(e.status)}`,
        e.worker_id ? ` · worker ${e.worker_id}` : "", e.finished_at ? ` · ${fmtAgo(e.finished_at)}` : ""),
      h("pre", { class: "code", text: e.error }))));
  }

  function configList(config) {
    const entries = configEntries(config);
    if (!entries.length) return h("p", { class: "hint", text: "The default schedule (no knobs)." });
    return h("dl", { class: "kv" }, entries.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: fmtValue(v) })]));
  }

  function renderBest(p) {
    const box = $("best-config");
    if (!p.best) {
      replace(box, h("p", { class: "hint", text: FINAL.has(p.task.status)
        ? "This task found no correct config." : "Appears with the first correct measurement." }));
      return;
    }
    const b = p.best;
    const t = p.task;
    // At export the tuner measures the best configs again; the task keeps that latency.
    const revalidated = t.status === "done" && t.best_latency_s && !p.best_reused
      && Math.abs(t.best_latency_s - b.latency_s) > 0.005 * b.latency_s;
    const index = b.config && b.config.index !== undefined ? ` · config ${b.config.index}` : "";
    replace(box,
      revalidated
        ? h("p", {}, h("strong", { id: "best-gflops", text: fmtGflops(t.best_gflops) }),
          ` · ${fmtMeasured(t.best_latency_s, t.best_disturbance)} measured again for the artifact`,
          ` · trial #${b.trial_id}${index}`,
          ` (${fmtGflops(b.gflops)} during the search)`)
        : h("p", {}, h("strong", { id: "best-gflops", text: fmtGflops(b.gflops) }),
          ` · ${fmtLatency(b.latency_s)} · trial #${b.trial_id}${index}`,
          p.best_reused ? " (reused from an earlier task)" : ""),
      configList(b.config));
  }

  function renderTop(p) {
    const box = $("top-configs");
    if (!p.top.length) {
      replace(box, h("p", { class: "hint", text: "No correct trial yet." }));
      return;
    }
    replace(box, h("table", { class: "data cards", id: "top-table" },
      h("thead", {}, h("tr", {}, h("th", { text: "#" }), h("th", { class: "num", text: "GFLOP/s" }),
        h("th", { class: "num", text: "Latency" }), h("th", { text: "Trial" }), h("th", { text: "Config" }))),
      h("tbody", {}, p.top.map((c, i) => h("tr", {},
        h("td", { "data-label": "Rank", class: "nowrap", text: i + 1 }),
        h("td", { "data-label": "GFLOP/s", class: "num", text: fmtNumber(c.gflops) }),
        h("td", { "data-label": "Latency", class: "num",
          text: `${fmtMeasured(c.latency_s, c.disturbance)}${c.disturbed ? " (disturbed)" : ""}` }),
        h("td", { "data-label": "Trial", class: "nowrap", text: `#${c.trial_id}${c.worker_id ? ` · worker ${c.worker_id}` : ""}` }),
        h("td", { "data-label": "Config", class: "config", text: fmtConfig(c.config) || "default" }))))));
  }

  function renderPrototype(state) {
    const box = $("prototype");
    const t = state.progress.task;
    if (!t.artifact) {
      replace(box, h("p", { class: "hint", text: FINAL.has(t.status)
        ? `No artifact: the task ended (${humanStatus(t.status)}) without one.`
        : "The prototype appears when the artifact is built, at the end of tuning." }));
      return;
    }
    const header = state.header;
    if (!header) { replace(box, h("p", { class: "hint", text: "Loading the header…" })); return; }
    if (header.error) { replace(box, h("p", { class: "err", text: header.error })); return; }
    replace(box,
      h("p", { class: "hint" }, "From ", h("code", { text: header.file_name }),
        `: link with -l:${header.kernel}.so. Each pointer is a dense buffer of the shape in the comment.`),
      h("pre", { class: "code", id: "prototype-text", text: header.prototype }),
      h("details", {}, h("summary", { text: `Full header (${header.file_name})` }),
        h("pre", { class: "code", text: header.text })));
  }

  // ---------------------------------------------------------------- charts (SVG)

  function niceTicks(max, count) {
    if (!(max > 0)) return [0];
    const raw = max / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || 10 * mag;
    const ticks = [];
    for (let v = 0; ; v += step) {
      ticks.push(Number(v.toPrecision(12)));
      if (v >= max - step * 1e-9) break;
    }
    return ticks;
  }

  function timeTicks(max) {
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400];
    const step = steps.find((st) => max / st <= 6) || 86400 * Math.ceil(max / 86400 / 6);
    const ticks = [];
    for (let v = 0; v <= max + 1e-9; v += step) ticks.push(v);
    return ticks;
  }

  const fmtTick = (sec) => (sec < 60 ? `${sec}s` : sec < 3600 ? `${+(sec / 60).toFixed(1)}m` : `${+(sec / 3600).toFixed(1)}h`);

  function drawCharts(p) {
    const byTrial = [];
    const byTime = [];
    for (const [n, id, t, status, gflops] of p.points) {
      byTrial.push({ id, x: n, y: gflops, status });
      if (t !== null) byTime.push({ id, x: Math.max(0, t), y: gflops, status });
    }
    const empty = p.best_reused ? "Reused a stored best: this task measured nothing"
      : FINAL.has(p.task.status) ? "No trial was measured" : "No measured trials yet";
    drawChart($("chart-trials"), byTrial, { total: p.finished, empty, xLabel: "trials", xTicks: (max) => niceTicks(max, 6).filter((v) => Number.isInteger(v) && v <= max), fmtX: String, minX: 1 });
    drawChart($("chart-time"), byTime, { total: byTime.length && p.finished, empty, xLabel: "wall time since start", xTicks: timeTicks, fmtX: fmtTick, minX: 0 });
    const present = TRIAL_STATUSES.filter((st) => p.counts[st] > 0 && st !== "queued" && st !== "running");
    const legend = $("chart-legend");
    replace(legend, p.points.length ? [
      h("span", {}, h("span", { class: "swatch line" }), "best so far"),
      present.map((st) => h("span", { class: `s-${st}` }, h("span", { class: "swatch status" }),
        st === "ok" ? "trial (correct)" : `${humanStatus(st)} (×, at 0)`)),
    ] : []);
  }

  /** Pushes the grid, ticks, axes and labels of a chart of `width`×`height` onto `nodes`;
   * returns its scales `X`, `Y` (data to pixels), margins `m` and plot height `ph`. */
  function chartFrame(nodes, { width, height, maxX, yTicks, xTicks, fmtX, xLabel, yLabel }) {
    const m = { left: 52, right: 14, top: 12, bottom: 38 };
    const pw = width - m.left - m.right;
    const ph = height - m.top - m.bottom;
    const maxY = yTicks[yTicks.length - 1] || 1;
    const X = (x) => m.left + (x / maxX) * pw;
    const Y = (y) => m.top + ph - (y / maxY) * ph;
    for (const v of yTicks) {
      nodes.push(s("line", { class: "grid", x1: m.left, x2: m.left + pw, y1: Y(v), y2: Y(v) }));
      nodes.push(s("text", { x: m.left - 6, y: Y(v) + 4, "text-anchor": "end", text: fmtNumber(v) }));
    }
    for (const v of xTicks(maxX)) {
      nodes.push(s("line", { class: "axis", x1: X(v), x2: X(v), y1: m.top + ph, y2: m.top + ph + 4 }));
      nodes.push(s("text", { x: X(v), y: m.top + ph + 16, "text-anchor": "middle", text: fmtX(v) }));
    }
    nodes.push(s("line", { class: "axis", x1: m.left, x2: m.left + pw, y1: m.top + ph, y2: m.top + ph }));
    nodes.push(s("line", { class: "axis", x1: m.left, x2: m.left, y1: m.top, y2: m.top + ph }));
    nodes.push(s("text", { x: m.left + pw / 2, y: height - 4, "text-anchor": "middle", text: xLabel }));
    nodes.push(s("text", { x: 12, y: m.top + ph / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${m.top + ph / 2})`, text: yLabel }));
    return { X, Y, m, ph };
  }

  function drawChart(svgEl, points, { total, empty, xLabel, xTicks, fmtX, minX }) {
    // first: the CSS sizes an empty chart smaller
    svgEl.dataset.points = points.length ? total : 0; // finished trials, drawn or thinned out
    svgEl.dataset.drawn = points.length;
    const box = svgEl.getBoundingClientRect();
    const width = Math.max(280, Math.round(box.width || 600));
    const height = Math.max(points.length ? 180 : 40, Math.round(box.height || 260));
    svgEl.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const ok = points.filter((pt) => pt.y !== null && pt.y !== undefined);
    const best = ok.length ? Math.max(...ok.map((pt) => pt.y)) : null;
    svgEl.dataset.best = best === null ? "" : best.toFixed(3);
    if (!points.length) {
      replace(svgEl, s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty-msg", text: empty }));
      return;
    }
    const maxX = Math.max(minX + 1, ...points.map((pt) => pt.x));
    const nodes = [];
    const { X, Y, m, ph } = chartFrame(nodes, { width, height, maxX, yTicks: niceTicks((best || 1) * 1.05, 5),
      xTicks, fmtX, xLabel, yLabel: "GFLOP/s" });

    // every trial: correct ones as dots at their GFLOP/s, failed ones as crosses at zero
    const dots = [];
    for (const pt of points) {
      const cx = X(pt.x);
      if (pt.y !== null && pt.y !== undefined) {
        dots.push(s("circle", { class: `pt s-${pt.status}`, cx, cy: Y(pt.y), r: 3.2, "data-status": pt.status },
          s("title", { text: `trial #${pt.id}: ${fmtNumber(pt.y)} GFLOP/s` })));
      } else {
        const cy = m.top + ph - 4;
        dots.push(s("path", { class: `fail s-${pt.status}`, d: `M${cx - 3.5} ${cy - 3.5}L${cx + 3.5} ${cy + 3.5}M${cx - 3.5} ${cy + 3.5}L${cx + 3.5} ${cy - 3.5}`,
          "data-status": pt.status },
        s("title", { text: `trial #${pt.id}: ${humanStatus(pt.status)}` })));
      }
    }
    nodes.push(s("g", { class: "points" }, dots));

    // best so far: a step line through each new best, held to the last trial
    let running = null;
    let d = "";
    for (const pt of points) {
      if (pt.y === null || pt.y === undefined) continue;
      if (running === null) { running = pt.y; d = `M${X(pt.x)} ${Y(running)}`; continue; }
      if (pt.y > running) { d += `H${X(pt.x)}V${Y(pt.y)}`; running = pt.y; }
    }
    if (running !== null) {
      d += `H${X(points[points.length - 1].x)}`;
      nodes.push(s("path", { class: "best", d }));
    }
    replace(svgEl, nodes);
  }

  // ---------------------------------------------------------------- models

  /** The models panel of the tasks page: the newest models, each linked to its page. */
  async function renderModelsPanel() {
    const page = await api("/models?limit=10");
    $("models-panel").hidden = page.total === 0;
    $("models-count").textContent = page.total === 1 ? "1 model" : `${page.total} models`;
    if (!page.items.length) return false;
    replace($("models-body"), h("table", { class: "data cards", id: "models-table" },
      h("thead", {}, h("tr", {}, h("th", { text: "Model" }), h("th", { text: "Status" }),
        h("th", { class: "num", text: "Layers tuned" }), h("th", { class: "num", text: "Trials" }),
        h("th", { class: "num", text: "Estimated latency" }), h("th", { class: "num", text: "Untuned FLOPs" }))),
      h("tbody", {}, page.items.map((md) => h("tr", { "data-model-id": md.id, "data-status": md.status },
        h("td", { class: "first", "data-label": "Model" },
          h("a", { class: "task-link", href: `/models/${md.id}`, text: `#${md.id}` }), " ", h("span", { class: "op-name", text: md.name })),
        h("td", { "data-label": "Status" }, badge(md.status)),
        h("td", { "data-label": "Layers tuned", class: "num", text: layersTuned(md) }),
        h("td", { "data-label": "Trials", class: "num", text: `${md.trials_done} / ${md.trials}` }),
        h("td", { "data-label": "Estimated latency", class: "num", text: fmtLatency(md.estimated_latency_s) }),
        h("td", { "data-label": "Untuned FLOPs", class: "num", text: fmtShare(md.untuned_flop_share) }))))));
    return page.items.some((md) => !FINAL.has(md.status));
  }

  const layersTuned = (md) => `${md.tasks.filter((t) => t.best_latency_s !== null).length} / ${md.tasks.length}`;
  const fmtShare = (x) => `${(100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 1)}%`;

  function modelPage() {
    const id = Number(document.body.dataset.modelId);
    const state = { id, model: null, ops: new Map() };
    api("/ops").then((ops) => { for (const op of ops) state.ops.set(op.name, op); if (state.model) renderModel(state); }).catch(() => {});
    const msg = $("action-msg");
    const say = (text, kind) => { msg.className = `action-msg ${kind || ""}`; replace(msg, text); };
    $("download-button").addEventListener("click", () => saveDownload(`/models/${id}/bundle`, `model-${id}-bundle.tar.gz`, say));
    setupCancel(`/models/${id}/cancel`, "Model", say, () => poll.poke());
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => state.model && drawEstimate($("chart-estimate"), state.model), 150);
    });
    const poll = poller(async () => {
      try {
        state.model = await api(`/models/${id}`);
      } catch (err) {
        if (err.status !== 404) throw err;
        $("model-view").hidden = true;
        setLive("idle", "Nothing to update");
        return null;
      }
      $("model-view").hidden = false;
      renderModel(state);
      if (FINAL.has(state.model.status)) {
        setLive("idle", `Model ${humanStatus(state.model.status)}: updates stopped`);
        return null;
      }
      setLive("live", `Live: updating every ${POLL_ACTIVE_MS / 1000} s while the model tunes`);
      return POLL_ACTIVE_MS;
    });
  }

  function renderModel(state) {
    const md = state.model;
    document.title = `Model ${md.id} · ${md.name} · ${humanStatus(md.status)} · tunefleet`;
    $("model-name").textContent = `${md.name} (#${md.id})`;
    const status = $("model-status");
    status.dataset.status = md.status;
    status.textContent = humanStatus(md.status);
    $("model-error").hidden = !md.error;
    $("model-error").textContent = md.error || "";
    $("download-button").hidden = md.status !== "done";
    showCancel(md.status);
    const stat = (label, value, id) => h("div", {}, h("dt", { text: label }), h("dd", { id, text: value }));
    replace($("model-stats"),
      stat("Trials", `${md.trials_done} / ${md.trials}`, "stat-trials"),
      stat("Layers tuned", layersTuned(md), "stat-layers"),
      stat("Estimated latency", fmtLatency(md.estimated_latency_s), "stat-estimate"),
      stat("Untuned FLOPs", fmtShare(md.untuned_flop_share), "stat-untuned"),
      stat("Target", md.target, "stat-target"),
      stat("Device key", md.device_key, "stat-device"),
      stat("Submitted", fmtAgo(md.created_at), "stat-created"));
    $("model-progress-bar").style.width = `${(100 * Math.min(1, md.trials_done / Math.max(1, md.trials))).toFixed(1)}%`;
    drawEstimate($("chart-estimate"), md);
    replace($("model-layers"), h("table", { class: "data cards", id: "layers-table" },
      h("thead", {}, h("tr", {}, h("th", { text: "Layer" }), h("th", { class: "num", text: "Occurrences" }),
        h("th", { class: "num", text: "FLOPs share" }), h("th", { text: "Nodes" }), h("th", { text: "Status" }),
        h("th", { class: "num", text: "Trials" }), h("th", { class: "num", text: "Best latency" }),
        h("th", { class: "num", text: "Best GFLOP/s" }))),
      h("tbody", {}, md.tasks.map((t) => h("tr", { "data-layer": t.index, "data-status": t.status },
        h("td", { class: "first", "data-label": "Layer" },
          t.task_id ? h("a", { class: "task-link", href: `/tasks/${t.task_id}`, text: `#${t.task_id}` }) : "—", " ",
          h("span", { class: "op-name", text: t.op }), h("div", { class: "shape", text: workloadSummary(t.workload, state.ops) })),
        h("td", { "data-label": "Occurrences", class: "num", text: t.occurrences }),
        h("td", { "data-label": "FLOPs share", class: "num", text: fmtShare(t.flop_share) }),
        h("td", { "data-label": "Nodes", class: "mono", text: nodeNames(t.nodes.map((n) => n[0])) }),
        h("td", { "data-label": "Status" }, badge(t.status), t.reused ? " reused" : ""),
        h("td", { "data-label": "Trials", class: "num", text: `${t.trials_done} / ${t.trials_given}` }),
        h("td", { "data-label": "Best latency", class: "num", text: fmtLatency(t.best_latency_s) }),
        h("td", { "data-label": "Best GFLOP/s", class: "num", text: fmtNumber(t.best_gflops) }))))));
    const groups = new Map();
    for (const u of md.untuned) {
      const key = `${u.op_type}\u0000${u.reason}`;
      if (!groups.has(key)) groups.set(key, { op: u.op_type, reason: u.reason, nodes: [], flop: 0 });
      const g = groups.get(key);
      g.nodes.push(u.node);
      g.flop += u.flop;
    }
    const untunedFlop = md.untuned.reduce((sum, u) => sum + u.flop, 0);
    replace($("model-untuned"), !groups.size ? h("p", { class: "hint", text: "Every node runs on a tuned kernel." })
      : h("table", { class: "data cards", id: "untuned-table" },
        h("thead", {}, h("tr", {}, h("th", { text: "Op" }), h("th", { text: "Nodes" }),
          h("th", { class: "num", text: "FLOPs share" }), h("th", { text: "Reason" }))),
        h("tbody", {}, [...groups.values()].sort((a, b) => b.flop - a.flop).map((g) => h("tr", {},
          h("td", { class: "first op-name", "data-label": "Op", text: g.op }),
          h("td", { "data-label": "Nodes", class: "mono", text: nodeNames(g.nodes) }),
          h("td", { "data-label": "FLOPs share", class: "num", text: fmtShare(untunedFlop ? md.untuned_flop_share * g.flop / untunedFlop : 0) }),
          h("td", { "data-label": "Reason", text: g.reason }))))));
  }

  const nodeNames = (names) => names.slice(0, 3).join(", ") + (names.length > 3 ? ` (+${names.length - 3})` : "");

  /** The model's estimate (ms) after each round, against wall time since it was submitted. */
  function drawEstimate(svgEl, md) {
    const origin = Date.parse(md.created_at);
    const points = md.history.map((p) => ({ x: Math.max(0, (Date.parse(p.at) - origin) / 1000), y: p.estimate_s * 1e3 }));
    svgEl.dataset.points = points.length;
    const box = svgEl.getBoundingClientRect();
    const width = Math.max(280, Math.round(box.width || 600));
    const height = Math.max(points.length ? 180 : 40, Math.round(box.height || 260));
    svgEl.setAttribute("viewBox", `0 0 ${width} ${height}`);
    if (!points.length) {
      replace(svgEl, s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty-msg",
        text: "The estimate appears once every layer has a kernel" }));
      return;
    }
    const nodes = [];
    const { X, Y } = chartFrame(nodes, { width, height, maxX: Math.max(1, ...points.map((p) => p.x)),
      yTicks: niceTicks(Math.max(...points.map((p) => p.y)) * 1.05, 5), xTicks: timeTicks, fmtX: fmtTick,
      xLabel: "wall time since submission", yLabel: "ms" });
    let d = "";
    for (const p of points) d += d ? `H${X(p.x)}V${Y(p.y)}` : `M${X(p.x)} ${Y(p.y)}`;
    nodes.push(s("path", { class: "best", d }));
    nodes.push(s("g", { class: "points" }, points.map((p) => s("circle", { class: "pt s-ok", cx: X(p.x), cy: Y(p.y), r: 3.2 },
      s("title", { text: `${fmtNumber(p.y)} ms after ${fmtTick(Math.round(p.x))}` })))));
    replace(svgEl, nodes);
  }

  // ---------------------------------------------------------------- workers page

  function workersPage() {
    let last = null;
    const render = () => {
      if (!last) return;
      const body = $("workers-body");
      $("workers-count").textContent = last.total === 1 ? "1 worker" : `${last.total} workers`;
      if (!last.items.length) {
        replace(body, h("div", { class: "empty", id: "workers-empty" },
          h("strong", { text: "No workers have registered yet." }),
          h("p", { text: "Tasks wait in the queue until a worker of their device key is up. Start one on a measurement host:" }),
          h("pre", { class: "code", text: `TUNEFLEET_WORKER_TOKEN_FILE=~/.tunefleet-worker-token \\\n  tunefleet worker --redis redis://REDIS-HOST:6379/0 --server ${location.origin} --device-key cpu-local` }),
          h("p", {}, "A worker token comes from ", h("code", { text: "tunefleet token create --name HOST --scope worker" }), "; keep it in a file only you can read (chmod 600), or in TUNEFLEET_WORKER_TOKEN — never on the command line.")));
        return;
      }
      replace(body, h("table", { class: "data cards", id: "workers-table" },
        h("thead", {}, h("tr", {}, h("th", { text: "Worker" }), h("th", { text: "Device key" }), h("th", { text: "Host" }),
          h("th", { text: "State" }), h("th", { text: "Last heartbeat" }), h("th", { class: "num", text: "Trials" }),
          h("th", { text: "Current task" }))),
        h("tbody", {}, last.items.map((w) => h("tr", { "data-worker-id": w.id, "data-state": w.state },
          h("td", { class: "first", "data-label": "Worker" }, h("strong", { text: w.name }), h("span", { class: "shape", text: ` #${w.id}` })),
          h("td", { "data-label": "Device key", class: "mono", text: w.device_key }),
          h("td", { "data-label": "Host" }, hostFacts(w.host)),
          h("td", { "data-label": "State" }, badge(w.state)),
          h("td", { "data-label": "Last heartbeat", text: fmtAgo(w.last_heartbeat) }),
          h("td", { "data-label": "Trials", class: "num", text: w.trials_done }),
          h("td", { "data-label": "Current task" }, w.current_task_id
            ? h("a", { href: `/tasks/${w.current_task_id}`, text: `#${w.current_task_id}` }) : "—"))))));
    };
    poller(async () => {
      last = await api("/workers?limit=500");
      render();
      setLive("live", `Live: updating every ${POLL_WORKERS_MS / 1000} s`);
      return POLL_WORKERS_MS;
    });
    setInterval(render, 1000);
  }

  function hostFacts(host) {
    host = host || {};
    const lines = [];
    const first = [host.hostname, host.cpu_model].filter(Boolean).join(" · ");
    if (first) lines.push(h("span", { text: first }));
    const cpus = [];
    if (host.cores) cpus.push(`${host.cores} cores`);
    if (host.affinity && host.affinity.length) cpus.push(`pinned to ${host.affinity.length} CPU${host.affinity.length > 1 ? "s" : ""} (${compactRanges(host.affinity)})`);
    if (cpus.length) lines.push(h("span", { text: cpus.join(", ") }));
    if (host.gpu_name) lines.push(h("span", { text: `${host.gpu_name}${host.compute_capability ? ` (sm ${host.compute_capability})` : ""}` }));
    if (host.isa && host.isa.length) lines.push(h("span", { class: "isa", text: host.isa.join(" ") }));
    const tools = Object.entries(host.toolchain || {}).map(([k, v]) => `${k} ${v}`).join(", ");
    if (tools) lines.push(h("span", { class: "isa", text: tools }));
    // how candidates are isolated; "none" (--no-sandbox, or a worker older than the sandbox) stands out
    const sandbox = host.sandbox || "none";
    lines.push(sandbox === "none"
      ? h("span", { class: "sandbox unsandboxed", text: "UNSANDBOXED: candidates run with the worker's rights (--no-sandbox)" })
      : h("span", { class: "sandbox isa", text: `sandbox: ${sandbox}` }));
    return lines.length ? h("div", { class: "facts" }, lines) : "—";
  }

  function compactRanges(cpus) {
    const sorted = [...cpus].sort((a, b) => a - b);
    const out = [];
    let start = sorted[0];
    let prev = sorted[0];
    for (const c of [...sorted.slice(1), null]) {
      if (c !== null && c === prev + 1) { prev = c; continue; }
      out.push(start === prev ? `${start}` : `${start}-${prev}`);
      start = prev = c;
    }
    return out.join(",");
  }

  // ---------------------------------------------------------------- start

  document.addEventListener("DOMContentLoaded", () => {
    setupToken();
    const page = document.body.dataset.page;
    if (page === "tasks") tasksPage();
    else if (page === "task") taskPage();
    else if (page === "model") modelPage();
    else if (page === "workers") workersPage();
  });
})();
