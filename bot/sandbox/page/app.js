// The sandbox page: draws the workspace as the chosen person sees it, renders Block Kit (a
// message the bot updates is redrawn in place, like the case card), the messages' reactions,
// sends what they type, click or react to the sandbox (which signs it and sends it to the bot),
// and shows the case's state and timeline from opsgate's REST API. Redraws on every
// server-sent event.
"use strict";

const $ = (id) => document.getElementById(id);
const page = { me: null, state: null, thread: null, caseId: null, pinned: false, cases: [] };

// -- talking to the sandbox ----------------------------------------------------------------

let chaosSwitching = null; // what the user set the chaos switch to, until the sandbox says so

async function post(path, body) {
  const reply = await fetch(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!reply.ok && reply.status !== 204) {
    const text = await reply.text();
    flash(`sandbox refused: ${text}`);
  }
  return reply;
}

function flash(text) {
  const note = document.createElement("div");
  note.className = "flash";
  note.textContent = text;
  document.body.appendChild(note);
  setTimeout(() => note.remove(), 4000);
}

async function refresh() {
  if (!page.me) return;
  const reply = await fetch(`/sandbox/state?user=${encodeURIComponent(page.me)}`);
  if (!reply.ok) return;
  page.state = await reply.json();
  draw();
}

// -- mrkdwn --------------------------------------------------------------------------------

function escapeHtml(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

function styled(text) {
  // Slack escapes &, < and > in text; undo that, then escape for HTML ourselves.
  const raw = text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  return escapeHtml(raw)
    .replace(/\*([^*\n]+)\*/g, "<b>$1</b>")
    .replace(/(^|[\s(])_([^_\n]+)_(?=$|[\s).,!?])/g, "$1<i>$2</i>")
    .replace(/~([^~\n]+)~/g, "<s>$1</s>")
    .replace(/\n/g, "<br>");
}

function angle(token) {
  const names = (page.state && page.state.names) || {};
  if (token.startsWith("@")) {
    const id = token.slice(1).split("|")[0];
    return `<span class="mention">@${escapeHtml(names[id] || id)}</span>`;
  }
  if (token.startsWith("!date^")) {  // Slack's date token: the reader's local time
    const [spec, fallback] = token.split("|");
    const at = new Date(Number(spec.split("^")[1]) * 1000);
    if (Number.isNaN(at.getTime())) return escapeHtml(fallback || "");
    return `<time datetime="${at.toISOString()}">${escapeHtml(at.toLocaleTimeString([], { hour12: false }))}</time>`;
  }
  if (token.startsWith("!subteam^")) {  // a user group: its handle
    const [spec, label] = token.split("|");
    const id = spec.split("^")[1];
    return `<span class="mention">${escapeHtml(label || names[id] || `@${id}`)}</span>`;
  }
  if (token.startsWith("!")) return `<span class="mention">@${escapeHtml(token.slice(1))}</span>`;
  if (token.startsWith("#")) return `<span class="mention">#${escapeHtml(token.slice(1).split("|").pop())}</span>`;
  const [url, label] = token.split("|");
  if (!/^https?:/.test(url)) return escapeHtml(`<${token}>`);
  return `<a href="${escapeHtml(url)}" target="_blank" rel="noopener">${escapeHtml(label || url)}</a>`;
}

function inline(text) {
  // code spans and <…> tokens first, so nothing inside them is formatted
  return text.split(/(`[^`\n]+`|<[^<>\n]+>)/g).map((part) => {
    if (/^`[^`]+`$/.test(part)) return `<code>${escapeHtml(part.slice(1, -1))}</code>`;
    if (/^<[^<>]+>$/.test(part)) return angle(part.slice(1, -1));
    return styled(part);
  }).join("");
}

function mrkdwn(text) {
  return String(text || "").split(/```/g).map((part, index) => (index % 2
    ? `<pre>${escapeHtml(part.replace(/^\n/, ""))}</pre>` : inline(part))).join("");
}

function textObject(object) {
  if (!object) return "";
  return object.type === "mrkdwn" ? mrkdwn(object.text) : escapeHtml(object.text || "").replace(/\n/g, "<br>");
}

// -- Block Kit -----------------------------------------------------------------------------

function button(element, message, block) {
  const node = document.createElement("button");
  node.type = "button";
  node.className = `bk-button ${element.style || ""}`;
  node.innerHTML = textObject(element.text);
  node.dataset.actionId = element.action_id;
  if (element.url) {
    node.onclick = () => window.open(element.url, "_blank", "noopener");
    return node;
  }
  node.onclick = () => post("/sandbox/click", {
    user: page.me, message_ts: message.ts, action_id: element.action_id, block_id: block.block_id,
  });
  return node;
}

function element(item, message, block) {
  if (item.type === "button") return button(item, message, block);
  const node = document.createElement("span");
  if (item.type === "image") {
    node.innerHTML = `<img src="${escapeHtml(item.image_url)}" alt="${escapeHtml(item.alt_text || "")}" class="bk-icon">`;
  } else {
    node.innerHTML = textObject(item);
  }
  return node;
}

// A task as Slack draws it in a plan: its state's mark, its title, its output and sources.
const TASK_MARKS = { pending: "○", in_progress: "◐", complete: "✓", error: "✗" };

function richText(object) {
  if (!object || !object.elements) return "";
  return object.elements.map((part) => (part.elements || []).map((e) => e.text || e.url || "").join("")).join("\n");
}

function taskCard(task) {
  const node = document.createElement("div");
  const status = task.status || "pending";
  node.className = `bk-task bk-task-${status}`;
  node.dataset.taskId = task.task_id || "";
  node.dataset.status = status;
  node.insertAdjacentHTML("beforeend", `<span class="bk-task-mark" title="${escapeHtml(status)}">${TASK_MARKS[status] || "•"}</span> <span class="bk-task-title">${escapeHtml(task.title || "")}</span>`);
  const output = richText(task.output);
  if (output) node.insertAdjacentHTML("beforeend", `<div class="bk-task-output">${escapeHtml(output)}</div>`);
  const sources = (task.sources || []).filter((s) => /^https?:/.test(s.url || ""));
  if (sources.length) {
    const links = sources.map((s) => `<a href="${escapeHtml(s.url)}" target="_blank" rel="noopener">${escapeHtml(s.text || s.url)}</a>`);
    node.insertAdjacentHTML("beforeend", `<div class="bk-task-sources">${links.join(" · ")}</div>`);
  }
  return node;
}

function renderBlock(block, message) {
  const node = document.createElement("div");
  node.className = `bk bk-${block.type}`;
  if (block.block_id) node.dataset.blockId = block.block_id;
  switch (block.type) {
    case "header":
      node.innerHTML = escapeHtml(block.text.text);
      break;
    case "section": {
      if (block.text) node.insertAdjacentHTML("beforeend", `<div>${textObject(block.text)}</div>`);
      if (block.fields) {
        const fields = document.createElement("div");
        fields.className = "bk-fields";
        block.fields.forEach((field) => fields.insertAdjacentHTML("beforeend", `<div>${textObject(field)}</div>`));
        node.appendChild(fields);
      }
      if (block.accessory) node.appendChild(element(block.accessory, message, block));
      break;
    }
    case "context":
      (block.elements || []).forEach((item) => node.appendChild(element(item, message, block)));
      break;
    case "divider":
      node.appendChild(document.createElement("hr"));
      break;
    case "actions":
      (block.elements || []).forEach((item) => node.appendChild(element(item, message, block)));
      break;
    case "image":
      node.innerHTML = `<img src="${escapeHtml(block.image_url)}" alt="${escapeHtml(block.alt_text || "")}">`;
      break;
    case "rich_text":
      node.textContent = message.text;
      break;
    case "plan": {
      node.insertAdjacentHTML("beforeend", `<div class="bk-plan-title">${escapeHtml(block.title || "")}</div>`);
      (block.tasks || []).forEach((task) => node.appendChild(taskCard(task)));
      break;
    }
    case "task_card":
      node.appendChild(taskCard(block));
      break;
    case "markdown":
      node.textContent = block.text || "";
      break;
    default:
      node.innerHTML = `<span class="muted">[${escapeHtml(block.type)} block]</span>`;
  }
  return node;
}

function renderMessage(message, inThread) {
  const item = document.createElement("li");
  item.className = `message${message.ephemeral ? " ephemeral" : ""}${message.bot_id ? " from-bot" : ""}`;
  item.dataset.ts = message.ts;
  const names = page.state.names;
  const when = new Date(parseFloat(message.ts) * 1000).toLocaleTimeString();
  item.insertAdjacentHTML("beforeend",
    `<div class="meta"><b>${escapeHtml(names[message.user] || message.user)}</b>` +
    `${message.bot_id ? ' <span class="tag">APP</span>' : ""}` +
    ` <span class="muted">${when}${message.edited ? " (edited)" : ""}</span>` +
    `${message.ephemeral ? ' <span class="tag">only visible to you</span>' : ""}</div>`);
  const body = document.createElement("div");
  body.className = "body";
  if (message.blocks && message.blocks.length) {
    message.blocks.forEach((block) => body.appendChild(renderBlock(block, message)));
  } else {
    body.innerHTML = mrkdwn(message.text);
  }
  item.appendChild(body);
  if (!message.ephemeral) item.appendChild(reactions(message));
  if (!inThread) {
    const replies = page.state.messages.filter((m) => m.thread_ts === message.ts).length;
    if (replies) {
      const link = document.createElement("button");
      link.type = "button";
      link.className = "link replies";
      link.textContent = `${replies} ${replies === 1 ? "reply" : "replies"}`;
      link.onclick = () => openThread(message.ts);
      item.appendChild(link);
    }
  }
  return item;
}

// -- reactions -----------------------------------------------------------------------------

const EMOJI = { pushpin: "📌", round_pushpin: "📍", eyes: "👀", white_check_mark: "✅", "+1": "👍" };
const PIN = "pushpin"; // opsgate's default OPSGATE_PIN_REACTION

function emoji(name) {
  return EMOJI[name] || `:${name}:`;
}

function react(message, name, on) {
  post("/sandbox/react", { user: page.me, message_ts: message.ts, reaction: name, on });
}

function reactions(message) {
  // Each reaction as a chip (click: add yours, or take it back), and a pin button while you
  // have not pinned the message yet.
  const bar = document.createElement("div");
  bar.className = "reactions";
  const names = page.state.names;
  (message.reactions || []).forEach((reaction) => {
    const mine = reaction.users.includes(page.me);
    const chip = document.createElement("button");
    chip.type = "button";
    chip.className = `reaction${mine ? " mine" : ""}`;
    chip.dataset.reaction = reaction.name;
    chip.title = reaction.users.map((user) => names[user] || user).join(", ");
    chip.textContent = `${emoji(reaction.name)} ${reaction.count}`;
    chip.onclick = () => react(message, reaction.name, !mine);
    bar.appendChild(chip);
  });
  const pinned = (message.reactions || []).some((r) => r.name === PIN && r.users.includes(page.me));
  if (!pinned) {
    const pin = document.createElement("button");
    pin.type = "button";
    pin.className = "link pin";
    pin.title = "React with :pushpin: — opsgate pins the message to the case";
    pin.textContent = "📌 pin";
    pin.onclick = () => react(message, PIN, true);
    bar.appendChild(pin);
  }
  return bar;
}

// -- drawing -------------------------------------------------------------------------------

function draw() {
  const state = page.state;
  const top = state.messages.filter((m) => !m.thread_ts);
  fill($("channel"), top.map((m) => renderMessage(m, false)));
  drawThread();
  drawModal();
  // A state drawn before the sandbox took the switch must not flip it back under the user.
  if (chaosSwitching === null || chaosSwitching === state.chaos) {
    chaosSwitching = null;
    $("chaos").checked = state.chaos;
  }
  fill($("deliveries"), state.deliveries.map((d) => {
    const item = document.createElement("li");
    const retry = d.attempt > 1 ? (d.kind === "event" ? ` retry ${d.attempt - 1}` : ` copy ${d.attempt}`) : "";
    item.textContent = `${d.kind}${retry} · ${d.ref} · ${d.status ?? "no answer"} in ${d.ms} ms`;
    item.className = d.status === 200 ? "" : "bad";
    return item;
  }));
}

function fill(list, items) {
  // Unchanged content keeps its nodes: a button being clicked must not be swapped for a copy
  // between mouse-down and mouse-up (handlers read the current user when clicked).
  const drawn = items.map((item) => item.outerHTML).join("");
  if (list.dataset.drawn === drawn) return;
  list.dataset.drawn = drawn;
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren(...items);
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function drawThread() {
  const list = $("thread");
  if (!page.thread) {
    $("thread-form").hidden = true;
    list.innerHTML = '<li class="muted">Open a thread from the channel.</li>';
    list.dataset.drawn = "";
    return;
  }
  const messages = page.state.messages.filter((m) => m.ts === page.thread || m.thread_ts === page.thread);
  fill(list, messages.map((m) => renderMessage(m, true)));
  $("thread-form").hidden = false;
  pickCaseFromThread(messages);
}

function openThread(ts) {
  page.thread = ts;
  page.pinned = false;
  drawThread();
  refreshCase();
}

function drawModal() {
  const open = page.state.views[0];
  const backdrop = $("modal");
  if (!open) {
    backdrop.hidden = true;
    backdrop.dataset.viewId = "";
    return;
  }
  const view = open.view;
  const errors = open.errors || {};
  if (backdrop.dataset.viewId === open.id && backdrop.dataset.errors === JSON.stringify(errors)) return;
  backdrop.dataset.viewId = open.id;
  backdrop.dataset.errors = JSON.stringify(errors);
  $("modal-title").textContent = (view.title && view.title.text) || "";
  $("modal-submit").textContent = (view.submit && view.submit.text) || "Submit";
  $("modal-submit").hidden = !view.submit;  // Slack shows no submit button on a view without one
  $("modal-close").textContent = (view.close && view.close.text) || "Cancel";
  const blocks = $("modal-blocks");
  blocks.replaceChildren();
  (view.blocks || []).forEach((block) => {
    if (block.type !== "input") {
      blocks.appendChild(renderBlock(block, { ts: "", text: "" }));
      return;
    }
    const label = document.createElement("label");
    label.className = "bk-input";
    label.innerHTML = `<span>${escapeHtml(block.label.text)}</span>`;
    const field = document.createElement(block.element.multiline ? "textarea" : "input");
    field.name = `${block.block_id}/${block.element.action_id}`;
    field.setAttribute("aria-label", block.label.text);
    label.appendChild(field);
    if (errors[block.block_id]) {
      label.insertAdjacentHTML("beforeend", `<span class="error">${escapeHtml(errors[block.block_id])}</span>`);
    }
    blocks.appendChild(label);
  });
  backdrop.hidden = false;
  const first = blocks.querySelector("textarea, input");
  if (first) first.focus();
}

// -- the case panel ------------------------------------------------------------------------

function pickCaseFromThread(messages) {
  if (page.pinned) return;
  const text = messages.map((m) => `${m.text} ${JSON.stringify(m.blocks || [])}`).join(" ");
  const found = page.cases.find((c) => text.includes(c.case_id.slice(0, 8)));
  if (found && found.case_id !== page.caseId) {
    page.caseId = found.case_id;
    refreshCase();
  }
}

async function refreshCases() {
  const reply = await fetch("/sandbox/cases");
  if (!reply.ok) return;
  const cases = (await reply.json()).data || [];
  cases.sort((a, b) => String(b.created_at).localeCompare(String(a.created_at)));
  page.cases = cases;
  const picker = $("case-picker");
  picker.replaceChildren(...cases.map((c) => {
    const option = document.createElement("option");
    option.value = c.case_id;
    option.textContent = `${c.case_id.slice(0, 8)} · ${c.status} · ${c.title}`.slice(0, 60);
    return option;
  }));
  if (!page.caseId && cases.length) page.caseId = cases[0].case_id;
  if (page.thread && page.state) drawThread();
  picker.value = page.caseId || "";
}

async function refreshCase() {
  if (!page.caseId) return;
  const reply = await fetch(`/sandbox/cases/${page.caseId}`);
  if (!reply.ok) return;
  const { case: found, timeline } = await reply.json();
  $("case-picker").value = found.case_id;
  $("case-summary").innerHTML =
    `<div><span id="case-status" class="status status-${escapeHtml(found.status)}">${escapeHtml(found.status)}</span>` +
    ` v${found.version} · ${escapeHtml(found.severity)}</div>` +
    `<div class="case-title">${escapeHtml(found.title)}</div>` +
    `<div class="muted">${escapeHtml(found.case_id)}</div>`;
  fill($("timeline"), timeline.map((row) => {
    const item = document.createElement("li");
    const meta = row.meta || {};
    const said = row.said || {};  // the event in words, people by name (the sandbox server's)
    const move = meta.outcome === "accepted" ? ` ${meta.from} → ${meta.to}` : "";
    const outcome = meta.outcome && meta.outcome !== "accepted" ? ` [${meta.outcome}]` : "";
    item.className = `row outcome-${meta.outcome || "none"}`;
    item.dataset.event = row.event;
    item.innerHTML = `<span class="muted">${escapeHtml(String(row.created_at).slice(11, 19))}</span> ` +
      `<b>${escapeHtml(said.event || row.event)}</b>${escapeHtml(move)}${escapeHtml(outcome)} ` +
      `<span class="muted">by ${escapeHtml(said.actor || row.actor)}</span>` +
      (row.reason ? `<div class="reason">${escapeHtml(said.reason || row.reason)}</div>` : "");
    return item;
  }));
}

// -- wiring --------------------------------------------------------------------------------

function composer(form, input, threadOf) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    const reply = await post("/sandbox/say", { user: page.me, text, thread_ts: threadOf() });
    if (reply.ok && !threadOf() && !text.startsWith("/")) {
      await refresh();
      const mine = page.state.messages.filter((m) => !m.thread_ts && m.user === page.me);
      if (mine.length) openThread(mine[mine.length - 1].ts);
    }
  });
}

async function start() {
  const first = await (await fetch("/sandbox/state?user=")).json();
  const picker = $("who");
  first.people.forEach((person) => {
    const option = document.createElement("option");
    option.value = person.id;
    option.textContent = `${person.name} — ${person.role}`;
    picker.appendChild(option);
  });
  page.me = first.people[0].id;
  const role = () => { $("role").textContent = first.people.find((p) => p.id === page.me).real_name; };
  role();
  picker.addEventListener("change", () => { page.me = picker.value; role(); refresh(); });
  $("chaos").addEventListener("change", async (event) => {
    chaosSwitching = event.target.checked;
    const reply = await post("/sandbox/chaos", { on: chaosSwitching });
    if (!reply.ok) chaosSwitching = null;
  });
  $("close-thread").addEventListener("click", () => { page.thread = null; drawThread(); });
  $("case-picker").addEventListener("change", (event) => {
    page.caseId = event.target.value; page.pinned = true; refreshCase();
  });
  composer($("channel-form"), $("channel-input"), () => null);
  composer($("thread-form"), $("thread-input"), () => page.thread);
  $("modal-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const values = {};
    $("modal-blocks").querySelectorAll("[name]").forEach((field) => {
      const [block, action] = field.name.split("/");
      values[block] = { ...(values[block] || {}), [action]: field.value };
    });
    post("/sandbox/submit", { user: page.me, view_id: $("modal").dataset.viewId, values });
  });
  $("modal-close").addEventListener("click", () => {
    post("/sandbox/dismiss", { user: page.me, view_id: $("modal").dataset.viewId });
  });
  const stream = new EventSource("/sandbox/stream");
  stream.onmessage = () => { refresh(); refreshCases().then(refreshCase); };
  setInterval(() => refreshCases().then(refreshCase), 1500);
  await refresh();
  await refreshCases();
  await refreshCase();
}

start();
