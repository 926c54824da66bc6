// attserve explanation page: pick a task and a model, send texts with `explain: true`, and
// draw the answer (label, scores, tokens, attention). Vanilla ES2020, no dependencies; the
// page's Content-Security-Policy allows only this file, so no inline handlers or styles:
// colours are set through CSS custom properties (element.style.setProperty), which CSP allows.
"use strict";

(() => {
  // The tasks come from the service's task registry (tasks.json, beside this file: service/http/ui.py
  // makes it from core.tasks): name -> its endpoint (relative to /ui/, so the page works behind a
  // path prefix), its text fields (`many`: a list, one text per line), whether it is labelled,
  // its per-text output and its example. Each task's form is made from its fields, so a new
  // task of the registry appears here with nothing else changed.
  const TASKS = {};
  // Zero-shot is the page's own form (index.html), no task: candidate labels as entailment
  // hypotheses (service.http.zero_shot), answered by the models of the task tasks.json names.
  const ZERO_SHOT = "zero_shot";
  // Accepted in ?task=: the task names, their endpoint names and paths (filled from tasks.json).
  const TASK_ALIASES = {};
  // task -> {field name -> its text box}
  const inputs = {};
  const UNKNOWN_TITLE = "unknown word";
  const CUT_TITLE = "cut: beyond the model's max length";
  const NO_ATTENTION = "this model exposes no attention weights";

  const $ = (id) => document.getElementById(id);
  const form = $("form");
  const modelSelect = $("model");
  const alertBox = $("alert");
  const statusLine = $("status");
  const result = $("result");

  let catalog = null; // the /v1/models answer
  const chosenModel = {}; // task -> model name picked by the user
  let busy = false;

  // --- small DOM helpers -----------------------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("data-")) node.setAttribute(key, String(value));
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const fmt = (x) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(3) : "–");
  const pct = (x) => `${Math.max(0, Math.min(1, Number(x) || 0)) * 100}%`;
  // Shade an element: --w in [0, 1]; the CSS mixes the heat colour by it.
  function shade(node, weight) {
    const w = Math.max(0, Math.min(1, weight));
    node.style.setProperty("--w", String(w));
    node.classList.toggle("hot", w > 0.55); // dark text on the strong colour, in both schemes
  }

  // --- alert and status ------------------------------------------------------------------

  function showAlert(title, message) {
    alertBox.replaceChildren(el("strong", { text: title }), " ", el("span", { class: "alert-message", text: message }));
    alertBox.hidden = false;
  }

  function clearAlert() {
    alertBox.hidden = true;
    alertBox.replaceChildren();
  }

  function setStatus(text) {
    statusLine.textContent = text;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // The service answers every error as {"error": {"code", "message"}}; anything else (a proxy's
  // HTML page, an empty body) is reported by its status line.
  async function readAnswer(response) {
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error;
      if (error && typeof error.message === "string") {
        throw new ApiError(response.status, error.code || "error", error.message);
      }
      throw new ApiError(response.status, "http_error", `${response.status} ${response.statusText || ""}`.trim());
    }
    if (data === null) throw new ApiError(response.status, "bad_answer", "the service sent no JSON");
    return data;
  }

  function reportError(err, what) {
    if (err instanceof ApiError) {
      showAlert(`${what} failed (${err.status} ${err.code}):`, err.message);
    } else {
      showAlert(`${what} failed:`, `could not reach the service (${err && err.message ? err.message : err})`);
    }
    setStatus("");
  }

  // --- task and model pickers ------------------------------------------------------------

  function currentTask() {
    const checked = form.querySelector('input[name="task"]:checked');
    return checked ? checked.value : Object.keys(TASKS)[0];
  }

  function modelsOf(task) {
    if (!catalog) return [];
    const served = (TASKS[task] && TASKS[task].modelsOf) || task;
    return (catalog.models || []).filter((m) => m.task === served);
  }

  function modelInfo(name) {
    return catalog ? (catalog.models || []).find((m) => m.name === name) : undefined;
  }

  function showTask(task) {
    for (const field of form.querySelectorAll("[data-task]")) {
      field.hidden = field.dataset.task !== task;
    }
    // a labelled task's answer is explained; the others (a ranking, zero-shot's labels) are ranked
    $("submit").textContent = TASKS[task] && TASKS[task].labelled ? "Explain" : "Rank";
    fillModels(task);
  }

  function fillModels(task) {
    const models = modelsOf(task);
    if (!catalog) return;
    const taskInfo = (catalog.tasks || {})[(TASKS[task] && TASKS[task].modelsOf) || task] || {};
    modelSelect.replaceChildren();
    if (models.length === 0) {
      modelSelect.append(el("option", { value: "", text: "no model of this task is served" }));
      modelSelect.disabled = true;
      describeModel();
      return;
    }
    modelSelect.disabled = false;
    for (const m of models) {
      const notes = [];
      if (m.name === taskInfo.default || m.default) notes.push("default");
      if (m.status && m.status !== "ready") notes.push(m.status);
      if (m.explanation === null) notes.push("no attention");
      const text = `${m.name}${m.architecture ? ` · ${m.architecture}` : ""}${notes.length ? ` (${notes.join(", ")})` : ""}`;
      modelSelect.append(el("option", { value: m.name, text, disabled: m.status === "failed" }));
    }
    const wanted = chosenModel[task] || taskInfo.default || models[0].name;
    modelSelect.value = models.some((m) => m.name === wanted) ? wanted : models[0].name;
    describeModel();
  }

  function describeModel() {
    const info = modelInfo(modelSelect.value);
    const hint = $("model-info");
    if (!info) {
      hint.textContent = "";
      return;
    }
    const parts = [];
    if (info.description) parts.push(info.description);
    if (Array.isArray(info.labels) && info.labels.length) parts.push(`Labels: ${info.labels.join(", ")}.`);
    if (info.max_lengths) {
      parts.push(`Max length: ${Object.entries(info.max_lengths).map(([k, v]) => `${k.replace(/_ids$/, "")} ${v}`).join(", ")} tokens.`);
    }
    parts.push(info.explanation ? `Weights: ${info.explanation}.` : info.explanation === null ? `Weights: ${NO_ATTENTION}.` : "");
    hint.textContent = parts.filter(Boolean).join(" ");
    for (const span of form.querySelectorAll(".max-items")) {
      span.textContent = info.max_evidence ? String(info.max_evidence) : "a few";
    }
  }

  async function loadModels() {
    try {
      const response = await fetch("../v1/models", { headers: { accept: "application/json" } });
      catalog = await readAnswer(response);
    } catch (err) {
      modelSelect.replaceChildren(el("option", { value: "", text: "the task's default model" }));
      reportError(err, "Loading the model list");
      return;
    }
    // tasks without a model cannot be picked
    for (const radio of form.querySelectorAll('input[name="task"]')) {
      const none = modelsOf(radio.value).length === 0;
      radio.disabled = none;
      radio.closest("label").classList.toggle("disabled", none);
    }
    showTask(currentTask());
  }

  // ?task=verify&model=NAME preselect a task and a model
  function applyQuery() {
    const params = new URLSearchParams(window.location.search);
    let task = params.get("task");
    task = TASK_ALIASES[task] || task;
    if (task && TASKS[task]) {
      form.querySelector(`input[name="task"][value="${task}"]`).checked = true;
      const model = params.get("model");
      if (model) chosenModel[task] = model;
    }
  }

  // --- the request -----------------------------------------------------------------------

  const lines = (value) => value.split(/\r?\n/).filter((line) => line.trim() !== "");

  function bodyOf(task) {
    if (task === ZERO_SHOT) {
      const zeroShot = {
        text: $("zs-text").value,
        candidate_labels: lines($("candidate-labels").value).map((l) => l.trim()),
        hypothesis_template: $("hypothesis-template").value || TASKS[ZERO_SHOT].defaultTemplate,
        multi_label: $("multi-label").checked,
      };
      if (modelSelect.value) zeroShot.model = modelSelect.value;
      return zeroShot;
    }
    const spec = TASKS[task];
    const body = {};
    for (const field of spec.fields) {
      const value = inputs[task][field.name].value;
      body[field.name] = field.many ? lines(value) : value;
    }
    if (modelSelect.value) body.model = modelSelect.value;
    if (spec.labelled) body.explain = true;
    return body;
  }

  async function run(event) {
    event.preventDefault();
    if (busy) return;
    const task = currentTask();
    const body = bodyOf(task);
    busy = true;
    $("submit").disabled = true;
    result.setAttribute("aria-busy", "true");
    clearAlert();
    setStatus("Running the model…");
    try {
      const response = await fetch(TASKS[task].endpoint, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify(body),
      });
      const answer = await readAnswer(response);
      const totalMs = response.headers.get("x-total-time");
      // what is drawn follows the answer's shape, not the task's name
      if (task === ZERO_SHOT) {
        renderZeroShot(answer, totalMs);
        setStatus(`Done: ${answer.labels[0]} (${fmt(answer.scores[0])}).`);
      } else if (isRanking(answer)) {
        renderRanking(task, body, answer, totalMs);
        setStatus(`Done: ${answer.length} texts ranked; the best is text ${answer[0].index + 1} (${fmt(answer[0].score)}).`);
      } else if (answer && typeof answer.label === "string") {
        render(task, body, answer, totalMs);
        setStatus(`Done: ${answer.label}${answer.scores ? ` (${fmt(answer.scores[answer.label])})` : ""}.`);
      } else {
        renderOther(task, answer, totalMs);
        setStatus("Done.");
      }
    } catch (err) {
      result.hidden = true; // an old result under a new error would mislead
      reportError(err, "The request");
    } finally {
      busy = false;
      $("submit").disabled = false;
      result.removeAttribute("aria-busy");
    }
  }

  // --- rendering -------------------------------------------------------------------------

  // A ranking, as TEI's rerank answers it: [{index, score, text?}, ...], best first.
  function isRanking(answer) {
    return Array.isArray(answer) && answer.length > 0
      && answer.every((entry) => entry && typeof entry.index === "number" && typeof entry.score === "number");
  }

  function showView(task, view) {
    result.dataset.task = task;
    result.dataset.view = view;
  }

  function render(task, body, answer, totalMs) {
    result.querySelector(".verdict-key").textContent = "Label";
    $("result-label").textContent = answer.label;
    showView(task, "label");
    const meta = [answer.model];
    if (totalMs) meta.push(`${Number(totalMs).toFixed(1)} ms`);
    if (answer.truncated) meta.push("a text was cut to the model's max length");
    $("result-meta").textContent = meta.filter(Boolean).join(" · ");
    renderScores(answer.scores || {}, answer.label);

    const box = $("explanation");
    box.replaceChildren();
    const explanation = answer.explanation;
    $("method").textContent = explanation && explanation.method ? explanation.method : "";
    if (!explanation) {
      box.append(el("p", { class: "note", text: "The service sent no explanation with this answer." }));
    } else if (listField(TASKS[task])) {
      renderContexts(box, TASKS[task], body, answer, explanation);
    } else {
      renderTexts(box, task, body, explanation);
    }
    result.hidden = false;
  }

  // A ranking (rerank): the texts best first, each with its relevance (with rerank, the sigmoid
  // of the pair's log-odds); each text is the answer's, else the request's list field's.
  function renderRanking(task, body, ranking, totalMs) {
    showView(task, "ranking");
    const list = listField(TASKS[task]);
    const texts = list && Array.isArray(body[list.name]) ? body[list.name] : [];
    result.querySelector(".verdict-key").textContent = "Best";
    $("result-label").textContent = ranking.length ? `text ${ranking[0].index + 1}` : "no text";
    const meta = [modelSelect.value || "the default model"];
    if (totalMs) meta.push(`${Number(totalMs).toFixed(1)} ms`);
    $("result-meta").textContent = meta.join(" · ");
    const scores = $("scores");
    scores.replaceChildren();
    ranking.forEach((entry, rank) => {
      const fill = el("span", { class: "fill" });
      fill.style.width = pct(entry.score);
      const text = typeof entry.text === "string" ? entry.text : texts[entry.index] || "";
      scores.append(el("li", { class: rank === 0 ? "top" : null, "data-index": entry.index },
        el("span", { class: "score-name", text: `${entry.index + 1}. ${text}` }),
        el("span", { class: "bar", "aria-hidden": "true" }, fill),
        el("span", { class: "score-value", text: fmt(entry.score) })));
    });
    $("method").textContent = "";
    $("explanation").replaceChildren(el("p", { class: "note",
      text: "A ranking answers one relevance score per text (best first); it has no attention weights to show." }));
    result.hidden = false;
  }

  // An answer of a shape the page does not draw: its JSON, as the service sent it.
  function renderOther(task, answer, totalMs) {
    showView(task, "other");
    result.querySelector(".verdict-key").textContent = "Answer";
    $("result-label").textContent = "";
    $("result-meta").textContent = totalMs ? `${Number(totalMs).toFixed(1)} ms` : "";
    $("scores").replaceChildren();
    $("method").textContent = "";
    $("explanation").replaceChildren(el("pre", { class: "raw-answer", text: JSON.stringify(answer, null, 2) }));
    result.hidden = false;
  }

  // Zero-shot: the candidate labels best first, each with its score.
  function renderZeroShot(answer, totalMs) {
    showView(ZERO_SHOT, "zero-shot");
    result.querySelector(".verdict-key").textContent = "Best";
    $("result-label").textContent = answer.labels[0];
    const meta = [answer.model, answer.multi_label ? "each label on its own" : "one label fits"];
    if (totalMs) meta.push(`${Number(totalMs).toFixed(1)} ms`);
    if (answer.truncated) meta.push("a text was cut to the model's max length");
    $("result-meta").textContent = meta.join(" · ");
    const list = $("scores");
    list.replaceChildren();
    answer.labels.forEach((label, rank) => {
      const fill = el("span", { class: "fill" });
      fill.style.width = pct(answer.scores[rank]);
      list.append(el("li", { class: rank === 0 ? "top" : null },
        el("span", { class: "score-name", text: label }),
        el("span", { class: "bar", "aria-hidden": "true" }, fill),
        el("span", { class: "score-value", text: fmt(answer.scores[rank]) })));
    });
    $("method").textContent = "";
    $("explanation").replaceChildren(el("p", { class: "note",
      text: "Each label was tried as a hypothesis (the template with the label) by a model of the "
        + `${TASKS[ZERO_SHOT].modelsOf} task; to see the attention of one, send that pair to that task.` }));
    result.hidden = false;
  }

  function renderScores(scores, label) {
    const list = $("scores");
    list.replaceChildren();
    for (const [name, value] of Object.entries(scores)) {
      const fill = el("span", { class: "fill" });
      fill.style.width = pct(value);
      list.append(el("li", { class: name === label ? "top" : null, "data-label": name },
        el("span", { class: "score-name", text: name }),
        el("span", { class: "bar", "aria-hidden": "true" }, fill),
        el("span", { class: "score-value", text: fmt(value) })));
    }
  }

  // A task of single texts (one text, a pair): each text's tokens, then token weights (one
  // text) or the heat map.
  function renderTexts(box, task, body, explanation) {
    const tokens = explanation.tokens || {};
    const cuts = explanation.cut_tokens || {};
    const alignment = explanation.alignment;
    const weights = Array.isArray(explanation.token_weights) ? explanation.token_weights : null;
    // column tokens are shaded by the most any row token attends them (column max)
    const columnMax = alignment && alignment.rows !== alignment.columns ? columnMaxima(alignment.weights) : null;
    const scale = Math.max(1e-12, ...(weights || columnMax || [0]));
    const fields = TASKS[task].fields.map((f) => f.name);
    for (const field of fields) {
      let shading = null;
      let about = null;
      if (weights && fields.length === 1) {
        shading = weights;
        about = "Shaded by the token's weight";
      } else if (columnMax && alignment.columns === field) {
        shading = columnMax;
        about = `Shaded by how much the ${alignment.rows} attends each token (the largest weight in its column)`;
      }
      box.append(tokenSection(field, body[field], tokens[field], cuts[field] || 0, shading, scale, about));
    }
    if (alignment && Array.isArray(alignment.weights)) {
      box.append(heatmap(alignment, tokens[alignment.rows], tokens[alignment.columns],
        body[alignment.rows], body[alignment.columns], `${alignment.rows} × ${alignment.columns}`));
    } else if (!weights) {
      box.append(el("p", { class: "note no-attention", text: `${capitalize(NO_ATTENTION)}; the tokens are shown as the model read them.` }));
    }
  }

  // A text read against a list of texts (verify): the text's tokens, then one block per text
  // of the list, shaded by its share (the task's per-text output), with its heat map.
  function renderContexts(box, spec, body, answer, explanation) {
    const head = spec.fields.find((f) => !f.many).name;
    const many = listField(spec).name;
    const tokens = explanation.tokens || {};
    const cuts = explanation.cut_tokens || {};
    box.append(tokenSection(head, body[head], tokens[head], cuts[head] || 0, null, 1, null));
    // the explanation's per-text blocks (Explanation.evidence, whatever the list field's name)
    const blocks = Array.isArray(explanation.evidence) ? explanation.evidence : null;
    const listTokens = Array.isArray(tokens[many]) ? tokens[many] : [];
    const listCuts = Array.isArray(cuts[many]) ? cuts[many] : [];
    const shares = (spec.per_text && answer[spec.per_text]) || [];
    if (!blocks) {
      box.append(el("p", { class: "note no-attention", text: `${capitalize(NO_ATTENTION)}; the tokens are shown as the model read them.` }));
    }
    // one scale for every text of the list, so their shading compares
    const maxima = (blocks || []).map((b) => (b && b.alignment ? columnMaxima(b.alignment.weights) : []));
    const scale = Math.max(1e-12, ...maxima.flat());
    const list = el("div", { class: "evidence-list" });
    body[many].forEach((sentence, i) => {
      const block = blocks ? blocks[i] : null;
      const share = block && typeof block.share === "number" ? block.share : shares[i];
      const section = el("section", { class: "evidence-block", "data-field": many, "data-index": i, "data-share": share, "aria-labelledby": `evidence-${i}-heading` });
      shade(section, share || 0);
      const fill = el("span", { class: "fill" });
      fill.style.width = pct(share);
      section.append(
        el("h4", { id: `evidence-${i}-heading` }, `${capitalize(many)} ${i + 1} `,
          el("span", { class: "share" }, "share ", el("span", { class: "share-value", text: fmt(share) }))),
        el("span", { class: "bar", "aria-hidden": "true" }, fill));
      const about = block && block.alignment ? `Shaded by how much the ${head} attends each token (the largest weight in its column)` : null;
      section.append(tokenList(sentence, listTokens[i], listCuts[i] || 0, maxima[i] && maxima[i].length ? maxima[i] : null, scale));
      if (about) section.append(el("p", { class: "hint", text: about }));
      section.append(...tokenNotes(listTokens[i], listCuts[i] || 0, maxima[i] && maxima[i].length ? maxima[i] : null, sentence));
      if (block && block.alignment) {
        const details = el("details", { class: "evidence-heatmap" },
          el("summary", { text: `Heat map: ${head} × ${many} ${i + 1}` }));
        details.append(heatmap(block.alignment, tokens[head], listTokens[i], body[head], sentence,
          `${head} × ${many} ${i + 1}`));
        section.append(details);
      }
      list.append(section);
    });
    box.append(el("h4", { class: "evidence-title", text: `${capitalize(many)}, shaded by its share of the ${head}'s representation` }), list);
  }

  function listField(spec) {
    return spec ? spec.fields.find((f) => f.many) : undefined;
  }

  function capitalize(s) {
    return s.charAt(0).toUpperCase() + s.slice(1);
  }

  function columnMaxima(matrix) {
    if (!Array.isArray(matrix) || matrix.length === 0) return [];
    const out = new Array(matrix[0].length).fill(0);
    for (const row of matrix) row.forEach((w, j) => { if (w > out[j]) out[j] = w; });
    return out;
  }

  // --- tokens ----------------------------------------------------------------------------

  // The span of a token in the original text. `start`/`end` count Unicode code points (the
  // service is Python), JavaScript strings count UTF-16 units: slice by code points.
  function spanText(codePoints, token) {
    if (typeof token.start === "number" && typeof token.end === "number" && token.end > token.start) {
      return codePoints.slice(token.start, token.end).join("");
    }
    return token.token;
  }

  function tokenSection(field, text, tokens, cut, weights, scale, about) {
    const section = el("section", { class: "text-block", "data-field": field, "aria-label": `${field} tokens` },
      el("h4", { text: capitalize(field) }));
    section.append(tokenList(text, tokens, cut, weights, scale));
    if (about && weights) section.append(el("p", { class: "hint", text: about }));
    section.append(...tokenNotes(tokens, cut, weights, text));
    return section;
  }

  // The original text with each token the model read wrapped: gaps (spaces, characters the
  // tokenizer drops) stay plain text, so the text reads as typed. The answer describes only the
  // tokens the model read and counts the `cut` ones: the text after the last one is struck through.
  function tokenList(text, tokens, cut, weights, scale) {
    const p = el("p", { class: "tokens" });
    if (!Array.isArray(tokens)) {
      p.textContent = text;
      return p;
    }
    const cps = Array.from(text || "");
    let at = 0;
    tokens.forEach((token, i) => {
      if (typeof token.start === "number" && token.start > at) p.append(cps.slice(at, token.start).join(""));
      const classes = ["tok"];
      const titles = [];
      const shown = spanText(cps, token);
      if (token.token && token.token !== shown) titles.push(`token: ${token.token}`);
      if (token.unknown) {
        classes.push("unknown");
        titles.push(UNKNOWN_TITLE);
      }
      let weight = null;
      if (weights && i < weights.length) {
        weight = weights[i];
        classes.push("weighted");
        titles.push(`weight ${fmt(weight)}`);
      }
      const span = el("span", {
        class: classes.join(" "),
        "data-index": i,
        "data-unknown": token.unknown ? "true" : "false",
        "data-truncated": "false",
        "data-weight": weight === null ? null : weight,
        title: titles.join("; ") || null,
        text: shown,
      });
      if (weight !== null) shade(span, weight / scale);
      p.append(span);
      if (typeof token.end === "number") at = Math.max(at, token.end);
    });
    const rest = cps.slice(at).join("");
    if (cut > 0 && rest.trim()) {
      const gap = rest.length - rest.trimStart().length;
      if (gap) p.append(rest.slice(0, gap));
      p.append(el("span", {
        class: "tok truncated",
        "data-truncated": "true",
        "data-cut": cut,
        title: `${CUT_TITLE} (${cut} ${cut === 1 ? "token" : "tokens"})`,
        text: rest.slice(gap),
      }));
    } else if (rest) {
      p.append(rest);
    }
    return p;
  }

  // Under a token list: the cut note, the unknown-word note and the top-weighted tokens in
  // words (the shading's numbers for those who cannot see it).
  function tokenNotes(tokens, cut, weights, text) {
    const out = [];
    if (!Array.isArray(tokens)) return out;
    const unknown = tokens.filter((t) => t.unknown).length;
    if (cut) {
      out.push(el("p", { class: "note cut-note", text: `${cut} of ${tokens.length + cut} tokens ${cut === 1 ? "was" : "were"} cut: beyond the model's max length (it read the first ${tokens.length}).` }));
    }
    if (unknown) {
      out.push(el("p", { class: "note unknown-note", text: `${unknown} unknown ${unknown === 1 ? "word" : "words"} (not in the model's vocabulary).` }));
    }
    if (weights && weights.length) {
      const cps = Array.from(text || "");
      const top = weights.map((w, i) => [w, i]).filter(([, i]) => i < tokens.length)
        .sort((a, b) => b[0] - a[0]).slice(0, 5)
        .map(([w, i]) => `“${spanText(cps, tokens[i])}” ${fmt(w)}`);
      out.push(el("p", { class: "hint top-tokens", text: `Most weight: ${top.join(", ")}.` }));
    }
    return out;
  }

  // --- the heat map ----------------------------------------------------------------------

  function heatmap(alignment, rowTokens, colTokens, rowText, colText, name) {
    const matrix = Array.isArray(alignment.weights) ? alignment.weights : [];
    const rowCps = Array.from(rowText || "");
    const colCps = Array.from(colText || "");
    const keptRows = rowTokens || [];
    const keptCols = colTokens || [];
    const rowLabel = (i) => (keptRows[i] ? spanText(rowCps, keptRows[i]) : `#${i + 1}`);
    const colLabel = (j) => (keptCols[j] ? spanText(colCps, keptCols[j]) : `#${j + 1}`);
    const nCols = matrix.length ? matrix[0].length : 0;
    let max = 1e-12;
    for (const row of matrix) for (const w of row) if (w > max) max = w;

    const figure = el("figure", { class: "heatmap", "data-rows": matrix.length, "data-columns": nCols });
    const readout = el("p", { class: "readout", "aria-hidden": "true", text: "Point at or focus a cell to read its weight." });
    figure.append(el("figcaption", {},
      `Rows: ${alignment.rows} tokens; columns: ${alignment.columns} tokens. Each row is one ${alignment.rows} token's attention over the ${alignment.columns} and sums to 1. `,
      `Colour scaled to the largest weight here (${fmt(max)}). In the grid, the arrow keys move between cells; Home/End go to a row's ends.`));

    const table = el("table", { class: "hm", role: "grid", "aria-label": `Attention heat map, ${name}` });
    const head = el("tr", {}, el("td", { class: "corner" }, el("span", { text: `${alignment.rows} ↓ · ${alignment.columns} →` })));
    for (let j = 0; j < nCols; j++) {
      head.append(el("th", { scope: "col", class: "hm-col" }, el("span", { text: colLabel(j) })));
    }
    const body = el("tbody");
    matrix.forEach((row, i) => {
      const tr = el("tr", {}, el("th", { scope: "row", class: "hm-row", text: rowLabel(i) }));
      row.forEach((w, j) => {
        const label = `${rowLabel(i)} → ${colLabel(j)}: ${w.toFixed(2)}`;
        const td = el("td", {
          class: "hm-cell", tabindex: i === 0 && j === 0 ? "0" : "-1",
          "aria-label": label, title: label, "data-row": i, "data-col": j,
        }, el("span", { class: "hm-value", text: w.toFixed(2) }));
        shade(td, w / max);
        tr.append(td);
      });
      body.append(tr);
    });
    table.append(el("thead", {}, head), body);

    const showRead = (target) => {
      const cell = target.closest && target.closest("td.hm-cell");
      if (cell) readout.textContent = cell.getAttribute("aria-label");
    };
    table.addEventListener("focusin", (e) => showRead(e.target));
    table.addEventListener("mouseover", (e) => showRead(e.target));
    table.addEventListener("keydown", (e) => gridKeys(e, table, matrix.length, nCols));

    const toggle = el("input", { type: "checkbox", class: "values-toggle" });
    const scroll = el("div", { class: "hm-scroll", role: "region", "aria-label": `Heat map, ${name} (scrolls sideways)`, tabindex: "-1" }, table);
    toggle.addEventListener("change", () => scroll.classList.toggle("show-values", toggle.checked));
    figure.append(el("label", { class: "values-label" }, toggle, " show the numbers in the cells"), scroll, readout);
    return figure;
  }

  function gridKeys(event, table, rows, cols) {
    const cell = event.target.closest && event.target.closest("td.hm-cell");
    if (!cell) return;
    let i = Number(cell.dataset.row);
    let j = Number(cell.dataset.col);
    switch (event.key) {
      case "ArrowUp": i = Math.max(0, i - 1); break;
      case "ArrowDown": i = Math.min(rows - 1, i + 1); break;
      case "ArrowLeft": j = Math.max(0, j - 1); break;
      case "ArrowRight": j = Math.min(cols - 1, j + 1); break;
      case "Home": j = 0; if (event.ctrlKey) i = 0; break;
      case "End": j = cols - 1; if (event.ctrlKey) i = rows - 1; break;
      default: return;
    }
    event.preventDefault();
    const next = table.querySelector(`td.hm-cell[data-row="${i}"][data-col="${j}"]`);
    if (next && next !== cell) {
      cell.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
  }

  // --- wiring ----------------------------------------------------------------------------

  function fillExample() {
    const task = currentTask();
    const example = TASKS[task].example || {};
    if (task === ZERO_SHOT) {
      $("zs-text").value = example.text || "";
      $("candidate-labels").value = (example.candidate_labels || []).join("\n");
      $("hypothesis-template").value = example.hypothesis_template || TASKS[ZERO_SHOT].defaultTemplate;
    } else {
      for (const field of TASKS[task].fields) {
        const value = example[field.name];
        inputs[task][field.name].value = Array.isArray(value) ? value.join("\n") : value || "";
      }
    }
    const first = form.querySelector("[data-task]:not([hidden]) textarea");
    if (first) first.focus();
  }

  // --- the tasks: from the registry (tasks.json) -------------------------------------------

  // An id no element of the page has yet: the field's name (what the README's and the tests'
  // selectors use), else the name prefixed by the task (two tasks with a field of one name).
  function freeId(task, name) {
    return document.getElementById(name) ? `${task}-${name}` : name;
  }

  function taskRadio(task, text, title, checked) {
    return el("label", { title }, el("input", { type: "radio", name: "task", value: task, checked }), ` ${text}`);
  }

  // One task's radio and form, made from its fields: a text field is a text box; a list field
  // a text box of one text per line.
  function addTask(spec, first) {
    const fields = spec.fields.map((f) => f.name);
    $("zero-shot-task").before(taskRadio(spec.name, `${capitalize(spec.label)} (${fields.join(", ")})`, spec.summary, first));
    inputs[spec.name] = {};
    for (const field of spec.fields) {
      const id = freeId(spec.name, field.name);
      const box = el("textarea", { id, name: id, rows: field.many ? 5 : fields.length === 1 ? 4 : 2, spellcheck: "false" });
      inputs[spec.name][field.name] = box;
      const label = el("label", { for: id }, capitalize(field.name));
      const div = el("div", { class: "field", "data-task": spec.name, "data-field": field.name, hidden: !first });
      if (field.many) {
        label.append(" ", el("span", { class: "hint-inline", text: "(one per line)" }));
        box.setAttribute("aria-describedby", `${id}-hint`);
        div.append(label, box, el("p", { id: `${id}-hint`, class: "hint" },
          `${field.description ? `${capitalize(field.description)}. ` : ""}Empty lines are ignored; the model takes at most `,
          el("span", { class: "max-items", text: "a few" }), "."));
      } else {
        div.append(label, box);
        if (field.description) {
          box.setAttribute("aria-describedby", `${id}-hint`);
          div.append(el("p", { id: `${id}-hint`, class: "hint", text: capitalize(field.description) }));
        }
      }
      $("task-fields").append(div);
    }
  }

  async function loadTasks() {
    const response = await fetch("tasks.json", { headers: { accept: "application/json" } });
    const registry = await readAnswer(response);
    registry.tasks.forEach((spec, i) => {
      TASKS[spec.name] = { ...spec, endpoint: `..${spec.endpoint}` };
      for (const alias of [spec.name, spec.label, spec.endpoint.replace(/^\//, "")]) TASK_ALIASES[alias] = spec.name;
      addTask(spec, i === 0);
    });
    const zs = registry.zero_shot;
    TASKS[ZERO_SHOT] = { name: ZERO_SHOT, endpoint: `..${zs.endpoint}`, fields: [], labelled: false, modelsOf: zs.models_of,
      example: zs.example, defaultTemplate: zs.default_template };
    TASK_ALIASES[zs.endpoint.replace(/^\//, "")] = ZERO_SHOT;
    TASK_ALIASES[ZERO_SHOT] = ZERO_SHOT;
  }

  async function start() {
    try {
      await loadTasks();
    } catch (err) {
      reportError(err, "Loading the tasks");
      return;
    }
    for (const radio of form.querySelectorAll('input[name="task"]')) {
      radio.addEventListener("change", () => showTask(currentTask()));
    }
    applyQuery();
    showTask(currentTask());
    loadModels();
  }

  form.addEventListener("submit", run);
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  modelSelect.addEventListener("change", () => {
    chosenModel[currentTask()] = modelSelect.value;
    describeModel();
  });
  $("example").addEventListener("click", fillExample);

  start();
})();
