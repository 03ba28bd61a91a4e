// supportflow console: plain JavaScript, no build step, no dependencies.
// Every call goes to the API that serves this page, with the token the
// person signed in with (kept in sessionStorage: this browser tab's
// session only). Data is always inserted as text, never as HTML.
'use strict';

const TOKEN_KEY = 'supportflow.token';
// The API's base path: the console is served at {base}console/.
const BASE = location.pathname.replace(/console\/.*$/, '').replace(/console$/, '') || '/';

const STATE_WORDS = {
  gathering: 'Reading the ticket',
  drafting: 'Drafting a reply',
  awaiting_approval: 'Waiting for a person to approve or reject',
  executing: 'Approved; being carried out',
  done: 'Done: approved and carried out',
  rejected: 'Rejected',
  superseded: 'Superseded: the customer wrote again',
  expired: 'Expired: nobody decided in time',
  failed: 'Failed',
};
const STATE_CLASS = {
  gathering: 'state-wait', drafting: 'state-wait', awaiting_approval: 'state-wait', executing: 'state-wait',
  done: 'state-ok', rejected: 'state-bad', superseded: 'state-bad', expired: 'state-bad', failed: 'state-bad',
};
const ACTION_WORDS = {
  pending: 'Not started yet',
  applying: 'In progress',
  applied: 'Done: everything landed',
  partial_failure: 'Partly done: something did not land',
  failed: 'Failed',
  needs_attention: 'Needs attention: a cancellation was refused, so the reply was held back',
};
const LEG_WORDS = { pending: 'Not done yet', done: 'Done', failed: 'Failed', unknown: 'Outcome unknown (being checked)', cancelled: 'Done' };
const ROLE_WORDS = {
  requester: 'Customer (requester)',
  end_user: 'Another end user (copied on the ticket)',
  agent: 'Agent',
  supportflow: 'supportflow (an earlier reply)',
};
const FILTERS = [
  ['awaiting_approval', 'Waiting for a person'],
  ['', 'All states'],
  ['gathering', null], // not a stored proposal state; never offered
  ['executing', 'Being carried out'],
  ['done', 'Done'],
  ['failed', 'Failed'],
  ['rejected', 'Rejected'],
  ['superseded', 'Superseded'],
  ['expired', 'Expired'],
].filter(([, words]) => words !== null);
const TERMINAL = new Set(['done', 'rejected', 'superseded', 'expired', 'failed']);

const session = { token: null, name: '', roles: [] };
let page = null; // the current page's controller (stop() on leaving)

// ---------- small helpers ----------

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// fill replaces box's children, leaving out null, undefined and false.
function fill(box, ...children) {
  box.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

function announce(text) {
  const a = document.getElementById('announce');
  a.textContent = '';
  // A change the screen reader notices even when the words repeat.
  setTimeout(() => { a.textContent = text; }, 30);
}

function stateWords(s) { return STATE_WORDS[s] || s; }
function stateBadge(s, id) {
  return h('span', { class: 'state ' + (STATE_CLASS[s] || ''), id, 'data-state': s }, stateWords(s));
}

const absFormat = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short',
});
const relFormat = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

function absolute(iso) { return absFormat.format(new Date(iso)); }
function relative(iso) {
  const secs = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  const abs = Math.abs(secs);
  if (abs < 60) return relFormat.format(secs, 'second');
  if (abs < 3600) return relFormat.format(Math.round(secs / 60), 'minute');
  if (abs < 86400) return relFormat.format(Math.round(secs / 3600), 'hour');
  return relFormat.format(Math.round(secs / 86400), 'day');
}
// A time in the viewer's time zone: relative, with the absolute beside it.
function when(iso, withRelative = true) {
  if (!iso) return h('span', {}, 'unknown time');
  const t = h('time', { datetime: iso, title: absolute(iso) }, absolute(iso));
  return withRelative ? h('span', {}, relative(iso) + ' (', t, ')') : t;
}

function plural(n, one, many) { return n + ' ' + (n === 1 ? one : many); }

// ---------- the API ----------

class HttpError extends Error {
  constructor(status, problem, headers) {
    super((problem && (problem.detail || problem.title)) || ('HTTP ' + status));
    this.status = status;
    this.problem = problem || {};
    this.headers = headers;
  }
}

// API_TIMEOUT bounds one call, its answer's body included: a hung call
// ends as a network error and frees the buttons waiting on it.
const API_TIMEOUT = 20000;

async function api(method, path, body, token = session.token) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), API_TIMEOUT);
  const init = { method, headers, cache: 'no-store', signal: timeout.signal };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  let data;
  try {
    resp = await fetch(BASE + path.replace(/^\//, ''), init);
    const type = resp.headers.get('Content-Type') || '';
    data = type.includes('json') ? await resp.json().catch(() => null) : null;
  } catch (e) {
    if (timeout.signal.aborted) throw new Error('no answer within ' + API_TIMEOUT / 1000 + ' s');
    throw e;
  } finally {
    clearTimeout(timer);
  }
  if (!resp.ok) {
    if (resp.status === 401 && token === session.token && session.token) {
      signOut('The API refused the token (it is no longer valid). Sign in again.');
    }
    throw new HttpError(resp.status, data, resp.headers);
  }
  return data;
}

// retryAfter reads a Retry-After header (seconds or an HTTP date) in ms.
function retryAfter(headers) {
  const v = headers && headers.get('Retry-After');
  if (!v) return null;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, t - Date.now());
}

function has(role) { return session.roles.includes(role); }

// ---------- session ----------

function renderSession() {
  const s = document.getElementById('session');
  fill(s);
  if (!session.token) return;
  s.append(
    h('span', { id: 'signed-in-as' }, 'Signed in as ', h('strong', {}, session.name), ' (roles: ' + (session.roles.join(', ') || 'none') + ')'),
    h('button', { type: 'button', id: 'sign-out', onclick: () => signOut('Signed out.') }, 'Sign out'),
  );
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  session.token = null;
  session.name = '';
  session.roles = [];
  renderSession();
  leavePage();
  renderSignIn(message);
}

function renderSignIn(message) {
  const main = document.getElementById('main');
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-help' });
  const err = h('p', { id: 'sign-in-error', role: 'alert', class: 'muted' });
  const form = h('form', { id: 'sign-in', class: 'panel' },
    h('div', { class: 'field' },
      h('label', { for: 'token' }, 'API token'),
      input,
      h('p', { id: 'token-help', class: 'muted small' },
        'A supportflow API token (SUPPORTFLOW_API_TOKENS). Reading drafts needs the app role; approving and rejecting need approver; retrying needs operator. ' +
        'The token is kept only for this browser tab\'s session and is sent only to this API.')),
    h('button', { type: 'submit', class: 'primary', id: 'sign-in-button' }, 'Sign in'),
    err);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) { err.textContent = 'Enter a token.'; return; }
    const button = form.querySelector('button');
    button.disabled = true;
    err.textContent = 'Checking the token…';
    try {
      await signIn(token);
    } catch (e) {
      err.textContent = e instanceof HttpError && e.status === 401
        ? 'The API does not accept that token.'
        : 'Could not reach the API (' + e.message + '). Try again.';
      button.disabled = false;
      input.focus();
    }
  });
  fill(main,
    h('h1', {}, 'Sign in'),
    message ? h('p', { class: 'notice', id: 'sign-in-message' }, message) : null,
    form);
  document.title = 'Sign in · supportflow console';
  input.focus();
}

async function signIn(token) {
  const who = await api('GET', '/whoami', undefined, token);
  sessionStorage.setItem(TOKEN_KEY, token);
  session.token = token;
  session.name = who.name;
  session.roles = who.roles || [];
  renderSession();
  route();
}

// ---------- routing ----------

function leavePage() {
  if (page && page.stop) page.stop();
  page = null;
}

// isRoute says whether a hash names a page ("#/..."). Any other hash (the
// skip link's "#main", an anchor) is not a page and is left alone.
function isRoute(hash) {
  return hash === '' || hash === '#' || hash.startsWith('#/');
}

function parseHash() {
  const raw = isRoute(location.hash) ? location.hash.replace(/^#/, '') || '/' : '/';
  const [path, query] = raw.split('?');
  return { path, params: new URLSearchParams(query || '') };
}

function route() {
  leavePage();
  if (!session.token) { renderSignIn(); return; }
  const main = document.getElementById('main');
  if (!has('app')) {
    fill(main,
      h('h1', {}, 'This token cannot read drafts'),
      h('div', { class: 'notice bad', id: 'needs-role', role: 'alert' },
        h('p', {}, 'Token "' + session.name + '" has the role' + (session.roles.length === 1 ? ' ' : 's ') + (session.roles.join(', ') || 'none') + '.'),
        h('p', {}, 'Reading drafts needs the app role. Ask for a token with app (with approver to approve and reject, operator to retry), then sign in with it.')),
      h('button', { type: 'button', onclick: () => signOut('Signed out.') }, 'Sign in with another token'));
    document.title = 'Token lacks the app role · supportflow console';
    return;
  }
  const { path, params } = parseHash();
  let m;
  if (path === '/' || path === '') {
    page = new DraftsPage(main, params);
  } else if ((m = path.match(/^\/tickets\/([1-9][0-9]{0,18})$/))) {
    page = new DraftPage(main, m[1], params.get('proposal'));
  } else {
    fill(main, h('h1', {}, 'Not found'), h('p', {}, 'No page at ' + path + '. '), h('a', { href: '#/' }, 'Go to the drafts'));
    return;
  }
  page.start();
}

// ---------- the drafts list ----------

class DraftsPage {
  constructor(main, params) {
    this.main = main;
    this.state = params.has('state') ? params.get('state') : 'awaiting_approval';
    this.abort = new AbortController();
    this.seq = 0; // the newest load; an older one's answer is dropped
  }

  start() {
    document.title = 'Drafts · supportflow console';
    const select = h('select', { id: 'state-filter', name: 'state' },
      FILTERS.map(([v, words]) => h('option', { value: v, selected: v === this.state }, words)));
    // The filter applies in place (no new page), so the select keeps the
    // focus: arrow keys on a closed select change it one step at a time.
    select.addEventListener('change', () => {
      this.state = select.value;
      history.replaceState(null, '', '#/?state=' + encodeURIComponent(select.value));
      this.load(true);
    });
    this.body = h('div', { id: 'drafts' }, h('p', { class: 'muted' }, 'Loading drafts…'));
    fill(this.main,
      h('h1', {}, 'Drafts'),
      h('div', { class: 'row' },
        h('div', { class: 'field' }, h('label', { for: 'state-filter' }, 'Show'), select),
        h('button', { type: 'button', id: 'refresh', onclick: () => this.load(true) }, 'Refresh')),
      h('p', { class: 'muted small' }, 'Drafts waiting for a person come first, then the newest. Times are in your time zone.'),
      this.body);
    this.load(false);
    this.loop();
  }

  stop() { this.abort.abort(); }

  async loop() {
    while (!this.abort.signal.aborted) {
      await sleep(15000, this.abort.signal);
      if (!this.abort.signal.aborted) await this.load(false);
    }
  }

  async load(announceIt) {
    const seq = ++this.seq;
    const q = new URLSearchParams({ limit: '200' });
    if (this.state) q.set('state', this.state);
    let list;
    try {
      list = await api('GET', '/proposals?' + q.toString());
    } catch (e) {
      if (this.abort.signal.aborted || seq !== this.seq) return;
      this.show(h('p', { class: 'notice bad', role: 'alert' }, 'Could not load the drafts: ' + e.message));
      return;
    }
    if (this.abort.signal.aborted || seq !== this.seq) return;
    // The API's order (newest first), those waiting for a person moved
    // ahead (a stable sort keeps the rest as they came).
    const waiting = (p) => (p.state === 'awaiting_approval' ? 0 : 1);
    const rows = list.proposals.slice().sort((a, b) => waiting(a) - waiting(b));
    if (rows.length === 0) {
      this.show(h('p', { id: 'no-drafts' }, this.state === 'awaiting_approval' ? 'No draft is waiting for a person.' : 'No drafts in this state.'));
    } else {
      const table = h('table', { id: 'drafts-table' },
        h('caption', {}, plural(rows.length, 'draft', 'drafts') + (rows.length >= list.limit ? ' (the newest ' + list.limit + ')' : '')),
        h('thead', {}, h('tr', {}, ['Ticket', 'State', 'Drafted', 'Proposes', 'Decision'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows.map((p) => h('tr', { 'data-proposal': p.id, 'data-ticket': p.ticket_id },
          h('td', {}, h('a', { href: '#/tickets/' + p.ticket_id + '?proposal=' + encodeURIComponent(p.id), class: 'ticket-link' }, 'Ticket ' + p.ticket_id)),
          h('td', {}, stateBadge(p.state)),
          h('td', {}, when(p.created_at)),
          h('td', {}, proposes(p)),
          h('td', {}, decisionLine(p) || h('span', { class: 'muted' }, 'none yet'))))));
      this.show(table);
    }
    if (announceIt) announce(plural(rows.length, 'draft', 'drafts') + ' listed.');
  }

  // show puts next in the list's place unless the same is shown already,
  // so the 15 s refresh leaves a focused link alone; when the list did
  // change, the focus goes back to the same row's link.
  show(next) {
    const cur = this.body.children;
    if (cur.length === 1 && cur[0].isEqualNode(next)) return;
    const active = document.activeElement;
    const row = active && this.body.contains(active) ? active.closest('tr[data-proposal]') : null;
    const lost = active && this.body.contains(active);
    fill(this.body, next);
    if (!lost) return;
    const again = row && this.body.querySelector('tr[data-proposal="' + CSS.escape(row.dataset.proposal) + '"] a.ticket-link');
    (again || document.getElementById('state-filter')).focus();
  }
}

function proposes(p) {
  const n = (p.cancel_subscriptions || []).length;
  return 'A reply of ' + plural(p.reply_chars, 'character', 'characters') + '; ' +
    (n === 0 ? 'no cancellations' : plural(n, 'cancellation', 'cancellations'));
}

// decisionLine says who decided a proposal and when (null: undecided).
function decisionLine(p) {
  if (p.approved_by) {
    return h('span', { class: 'decision' }, 'Approved by ', h('strong', {}, p.approved_by),
      p.on_behalf_of ? ' for ' + p.on_behalf_of : '', ', ', when(p.approved_at));
  }
  if (p.state === 'rejected') {
    return h('span', { class: 'decision' }, p.rejected_by ? ['Rejected by ', h('strong', {}, p.rejected_by)] : 'Rejected (the draft was cancelled)',
      ', ', when(p.decided_at), p.rejection_reason ? ': “' + p.rejection_reason + '”' : '');
  }
  if (p.state === 'superseded') return h('span', { class: 'decision' }, 'Superseded (the customer wrote again), ', when(p.decided_at));
  if (p.state === 'expired') return h('span', { class: 'decision' }, 'Expired undecided, ', when(p.decided_at));
  return null;
}

// ---------- the event stream ----------

// DraftStream reads GET /tickets/{id}/draft/events with fetch (an
// EventSource cannot send the bearer token) and reconnects by itself:
// after a network error or an API restart with backoff (1 s doubling to
// 30 s), after a 429 or 503 no sooner than its Retry-After, and after the
// draft settles every few seconds, since a superseded or held-back draft
// starts again under the same ticket.
class DraftStream {
  constructor(ticket, { onStatus, onConnection, onNoDraft }) {
    this.ticket = ticket;
    this.onStatus = onStatus;
    this.onConnection = onConnection;
    this.onNoDraft = onNoDraft;
    this.abort = new AbortController();
  }

  stop() { this.abort.abort(); }

  async run() {
    const signal = this.abort.signal;
    let backoff = 1000;
    let settledWait = 3000;
    let lastKey = '';
    while (!signal.aborted) {
      let resp;
      try {
        resp = await fetch(BASE + 'tickets/' + this.ticket + '/draft/events', {
          headers: { Authorization: 'Bearer ' + session.token, Accept: 'text/event-stream' }, cache: 'no-store', signal,
        });
      } catch (e) {
        if (signal.aborted) return;
        this.onConnection('reconnecting', 'The API cannot be reached; reconnecting in ' + Math.round(backoff / 1000) + ' s.');
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 30000);
        continue;
      }
      if (resp.status === 401) { signOut('The API refused the token. Sign in again.'); return; }
      if (resp.status === 404) {
        await resp.body?.cancel().catch(() => {});
        this.onNoDraft();
        this.onConnection('waiting', 'No draft yet; checking again in 5 s.');
        await sleep(5000, signal);
        continue;
      }
      if (!resp.ok) {
        const wait = retryAfter(resp.headers) ?? backoff;
        await resp.body?.cancel().catch(() => {});
        const why = resp.status === 429 ? 'Too many open streams for this token' : resp.status === 503 ? 'The API is unavailable' : 'The API answered ' + resp.status;
        this.onConnection('reconnecting', why + '; reconnecting in ' + Math.max(1, Math.round(wait / 1000)) + ' s.');
        await sleep(wait, signal);
        backoff = Math.min(backoff * 2, 30000);
        continue;
      }
      this.onConnection('live', 'Live: updates arrive as they happen.');
      let settled = false;
      let got = false;
      try {
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          // An event ends at an empty line; a line ends with CRLF, LF or a
          // lone CR (the HTML standard, "Parsing an event stream").
          // A CR at the end of the buffer may be half of a CRLF: wait for more.
          let m;
          while ((m = /(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)/.exec(buf)) &&
            !(m.index + m[0].length === buf.length && buf.endsWith('\r'))) {
            const block = buf.slice(0, m.index);
            buf = buf.slice(m.index + m[0].length);
            const data = block.split(/\r\n|\r|\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
            if (!data) continue;
            let st;
            try { st = JSON.parse(data); } catch { continue; }
            got = true;
            backoff = 1000;
            const key = JSON.stringify([st.state, st.proposal && st.proposal.id, st.error, st.generation]);
            if (key !== lastKey) settledWait = 3000;
            lastKey = key;
            settled = TERMINAL.has(st.state);
            this.onStatus(st);
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      if (signal.aborted) return;
      if (settled) {
        // The stream ends when the draft settles; the ticket may be
        // drafted again (the customer wrote, a reply was held back).
        this.onConnection('settled', 'The draft has settled; checking for a newer one every few seconds.');
        await sleep(settledWait, signal);
        settledWait = Math.min(settledWait * 2, 15000);
        continue;
      }
      this.onConnection('reconnecting', 'The stream ended (the API restarted or closed it); reconnecting.');
      await sleep(got ? 500 : backoff, signal);
      if (!got) backoff = Math.min(backoff * 2, 30000);
    }
  }
}

// ---------- a ticket's draft page ----------

class DraftPage {
  constructor(main, ticket, proposalId) {
    this.main = main;
    this.ticket = ticket;
    this.shownId = proposalId || null; // the proposal the page shows and decides on
    this.pinned = !!proposalId;
    this.status = null; // the draft's latest status (the stream)
    this.record = null; // GET /proposals/{shownId}
    this.action = null; // GET /actions/{key}
    this.conversation = null;
    this.conversationFor = undefined;
    this.conversationGone = new Map(); // proposal ID → the API's 404: asked once
    this.noDraft = false; // the page says the ticket has no draft
    this.busy = false;
    this.refusal = null;
    this.abort = new AbortController();
    this.lastAnnounced = '';
    this.sigs = new Map();
    this.lastKey = '';
  }

  start() {
    document.title = 'Ticket ' + this.ticket + ' · supportflow console';
    this.el = {
      state: h('p', { id: 'draft-state' }, 'Connecting…'),
      progress: h('p', { id: 'draft-progress', class: 'progress muted' }),
      connection: h('p', { id: 'connection', class: 'muted small' }),
      newer: h('div', { id: 'newer' }),
      proposal: h('section', { id: 'proposal', 'aria-labelledby': 'proposal-h' }),
      execution: h('section', { id: 'execution', 'aria-labelledby': 'execution-h' }),
      conversation: h('section', { id: 'conversation', 'aria-labelledby': 'conversation-h' }),
      history: h('section', { id: 'history', 'aria-labelledby': 'history-h' }),
    };
    fill(this.main,
      h('p', { class: 'small' }, h('a', { href: '#/' }, '← All drafts')),
      h('h1', {}, 'Ticket ' + this.ticket),
      h('section', { class: 'panel', 'aria-label': 'Draft status' }, this.el.state, this.el.progress, this.el.connection),
      this.el.newer,
      this.el.execution,
      this.el.proposal,
      this.el.conversation,
      this.el.history);
    this.main.focus();
    this.stream = new DraftStream(this.ticket, {
      onStatus: (st) => this.onStatus(st),
      onConnection: (kind, words) => { this.el.connection.textContent = words; this.el.connection.dataset.kind = kind; },
      onNoDraft: () => this.onNoDraft(),
    });
    this.stream.run();
    this.poll();
    this.render();
  }

  stop() {
    this.abort.abort();
    if (this.stream) this.stream.stop();
  }

  // onNoDraft runs at each of the stream's checks for a draft (every 5 s):
  // the words and the button are put there once, so a focused button or
  // "Draft requested" stays.
  onNoDraft() {
    this.status = null;
    if (!this.noDraft) {
      this.noDraft = true;
      fill(this.el.state, 'Ticket ' + this.ticket + ' has no draft.');
      fill(this.el.progress,
        h('button', { type: 'button', id: 'request-draft', onclick: (ev) => this.requestDraft(ev.currentTarget) }, 'Request a draft'));
    }
    this.render();
  }

  async requestDraft(button) {
    button.disabled = true;
    try {
      await api('POST', '/tickets/' + this.ticket + '/drafts', { reason: 'console' });
      announce('Draft requested for ticket ' + this.ticket + '.');
      fill(this.el.progress, 'Draft requested; waiting for it to start.');
    } catch (e) {
      button.disabled = false;
      const old = this.el.progress.querySelector('[role=alert]');
      if (old) old.remove();
      this.el.progress.append(' ', h('span', { role: 'alert' }, 'Could not request a draft: ' + e.message));
    }
  }

  onStatus(st) {
    this.status = st;
    this.noDraft = false;
    const p = st.proposal;
    if (p && !this.shownId) {
      this.shownId = p.id;
      this.refusal = null;
    }
    const words = stateWords(st.state);
    fill(this.el.state, 'State: ', stateBadge(st.state, 'draft-state-words'));
    let progress = '';
    if (st.progress && (st.state === 'gathering' || st.state === 'drafting')) {
      const pr = st.progress;
      progress = (pr.step ? pr.step[0].toUpperCase() + pr.step.slice(1) : 'Working') +
        (pr.tokens ? ': ' + plural(pr.tokens, 'token', 'tokens') + ' so far' : '') +
        (pr.attempt > 1 ? ' (attempt ' + pr.attempt + ', after an earlier attempt stopped)' : '');
    } else if (st.state === 'gathering' || st.state === 'drafting') {
      progress = 'Waiting for a worker to pick the draft up.';
    }
    if (st.worker_unavailable) progress = (progress ? progress + ' ' : '') + 'No worker is answering right now; the status is read from the database and may lag.';
    if (st.error && TERMINAL.has(st.state) && st.state !== 'rejected') progress = (progress ? progress + ' ' : '') + 'What happened: ' + st.error;
    this.el.progress.textContent = progress;
    if (words !== this.lastAnnounced) {
      this.lastAnnounced = words;
      announce('Ticket ' + this.ticket + ': ' + words + '.');
    }
    // Progress alone changes only the lines above; anything else may
    // change the proposal, its decision or the conversation.
    const key = JSON.stringify([st.state, p && p.id, st.error, st.generation, st.approved_by]);
    if (key !== this.lastKey) {
      this.lastKey = key;
      this.refresh();
    } else {
      this.render();
    }
  }

  // poll refreshes the shown proposal's record and execution while they
  // can still change (the stream carries the draft, not the legs).
  async poll() {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      const live = !this.record || ['executing', 'awaiting_approval'].includes(this.record.state) ||
        (this.action && ['pending', 'applying'].includes(this.action.state));
      await sleep(live ? 2000 : 10000, signal);
      if (!signal.aborted) await this.refresh();
    }
  }

  async refresh() {
    if (this.refreshing) { this.again = true; return; }
    this.refreshing = true;
    try {
      do {
        this.again = false;
        await this.load();
      } while (this.again && !this.abort.signal.aborted);
    } finally {
      this.refreshing = false;
    }
    if (!this.abort.signal.aborted) this.render();
  }

  async load() {
    const id = this.shownId;
    const jobs = [];
    if (id) {
      jobs.push(api('GET', '/proposals/' + encodeURIComponent(id)).then((r) => { if (id === this.shownId) this.record = r; })
        .catch((e) => { if (e.status === 404 && id === this.shownId) this.record = null; }));
      const own = this.ownRecord();
      if (own && own.actions && own.actions.length) {
        const key = own.actions[0].key;
        jobs.push(api('GET', '/actions/' + encodeURIComponent(key)).then((a) => { if (id === this.shownId) this.action = a; })
          .catch(() => {}));
      }
    }
    // The conversation: the shown proposal's, or while none is shown the
    // one the model is being given now.
    // A proposal's conversation is asked for until it is the drafted one
    // or the proposal is final; a proposal's 404 (none kept, or another
    // ticket's) is remembered and not asked again.
    const want = id || (this.status && this.status.state === 'drafting' ? '' : undefined);
    if (want && this.conversationGone.has(want)) {
      this.conversation = null;
      this.conversationFor = want;
      this.conversationError = this.conversationGone.get(want);
    } else if (want !== undefined && !this.conversationSettled(want)) {
      const q = want ? '?proposal_id=' + encodeURIComponent(want) : '';
      jobs.push(api('GET', '/tickets/' + this.ticket + '/draft/conversation' + q)
        .then((c) => { this.conversation = c; this.conversationFor = want; this.conversationError = null; })
        .catch((e) => {
          if (!(e instanceof HttpError)) return;
          if (e.status === 404 && want) this.conversationGone.set(want, e.message);
          if (e.status === 404 || e.status >= 500) { this.conversation = null; this.conversationError = e.message; this.conversationFor = want; }
        }));
    }
    if (!this.history || !this.historyAt || Date.now() - this.historyAt > 5000) {
      jobs.push(api('GET', '/proposals?ticket_id=' + this.ticket + '&limit=20').then((l) => { this.history = l.proposals; this.historyAt = Date.now(); })
        .catch(() => {}));
    }
    await Promise.all(jobs);
  }

  // conversationSettled says the conversation shown for want cannot change:
  // the model answered, or want's proposal is final.
  conversationSettled(want) {
    const c = this.conversation;
    if (!c || this.conversationFor !== want) return false;
    if (c.drafted) return true;
    const rec = this.ownRecord();
    return !!want && !!rec && rec.id === want && TERMINAL.has(rec.state);
  }

  // ownRecord is the shown proposal's record if it is this ticket's;
  // foreignRecord is it if it is another ticket's (a link or a hand-made
  // URL naming another ticket's proposal), which this page neither shows
  // nor decides.
  ownRecord() {
    const rec = this.record && this.record.id === this.shownId ? this.record : null;
    return rec && String(rec.ticket_id) === this.ticket ? rec : null;
  }

  foreignRecord() {
    const rec = this.record && this.record.id === this.shownId ? this.record : null;
    return rec && String(rec.ticket_id) !== this.ticket ? rec : null;
  }

  // The proposal as shown: the draft's own copy (with the cancellations'
  // descriptions) when it is the draft's current one, else the record.
  shown() {
    const st = this.status;
    const fromDraft = st && st.proposal && st.proposal.id === this.shownId ? st.proposal : null;
    const rec = this.ownRecord();
    if (!fromDraft && !rec) return null;
    return { draft: fromDraft, record: rec, id: this.shownId, reply: (fromDraft || rec).reply,
      subs: (fromDraft || rec).cancel_subscriptions || [], update: (fromDraft || rec).update_ticket };
  }

  // render redraws each section whose content changed, and only those:
  // a redraw would take the focus from a person typing a reason or about
  // to press a button.
  render() {
    const st = this.status;
    const rec = this.record && this.record.id === this.shownId ? this.record : null;
    const common = [this.shownId, st && st.state, st && st.proposal && st.proposal.id, session.roles.join(), rec && rec.ticket_id];
    this.put(this.el.newer, common, () => this.renderNewer());
    this.put(this.el.proposal, [common, rec, st && st.proposal && st.proposal.id === this.shownId ? st.proposal : null,
      this.conversation && this.conversation.proposal_id === this.shownId ? this.conversation.cancellations : null,
      this.refusal && [this.refusal.proposalId, this.refusal.error.status, this.refusal.error.message], this.busy], () => this.renderProposal());
    this.put(this.el.execution, [common, rec, this.action, this.retryResult, this.retrying], () => this.renderExecution());
    this.put(this.el.conversation, [this.shownId, this.conversation, this.conversationError], () => this.renderConversation());
    this.put(this.el.history, [this.shownId, this.history], () => this.renderHistory());
  }

  put(box, key, draw) {
    const sig = JSON.stringify(key);
    if (this.sigs.get(box) === sig) return;
    this.sigs.set(box, sig);
    draw();
  }

  renderNewer() {
    const st = this.status;
    const cur = st && st.proposal ? st.proposal.id : null;
    const box = this.el.newer;
    if (this.foreignRecord()) {
      fill(box);
    } else if (this.shownId && cur && cur !== this.shownId) {
      fill(box, h('div', { class: 'notice', id: 'newer-notice' },
        h('p', {}, 'A newer proposal of this ticket exists. This page still shows the one you opened, and its buttons act only on it.'),
        h('button', { type: 'button', class: 'show-current', onclick: () => this.showCurrent() }, 'Show the current proposal')));
    } else if (this.shownId && st && !cur && !TERMINAL.has(st.state) && st.state !== 'awaiting_approval') {
      fill(box, h('div', { class: 'notice', id: 'newer-notice' },
        h('p', {}, 'The ticket is being drafted again; its new proposal will be offered here when it is ready.')));
    } else {
      fill(box);
    }
  }

  showCurrent() {
    const st = this.status;
    this.refusal = null;
    this.record = null;
    this.action = null;
    if (st && st.proposal) {
      this.shownId = st.proposal.id;
      announce('Showing the current proposal ' + this.shownId + '.');
    } else {
      this.shownId = null; // the next proposal the draft shows is pinned
      announce('The newer proposal is still being drafted; it will appear when ready.');
    }
    history.replaceState(null, '', '#/tickets/' + this.ticket + (this.shownId ? '?proposal=' + encodeURIComponent(this.shownId) : ''));
    this.render();
    this.refresh();
    const heading = document.getElementById('proposal-h');
    if (heading) heading.focus();
  }

  renderProposal() {
    const box = this.el.proposal;
    const s = this.shown();
    const foreign = this.foreignRecord();
    if (!s && foreign) {
      const link = '#/tickets/' + foreign.ticket_id + '?proposal=' + encodeURIComponent(foreign.id);
      fill(box, h('h2', { id: 'proposal-h', tabindex: '-1' }, 'Proposal'),
        h('div', { class: 'notice bad', id: 'foreign-proposal', role: 'alert' },
          h('p', {}, 'Proposal ' + foreign.id + ' belongs to ticket ' + foreign.ticket_id + ', not to ticket ' + this.ticket +
            ': it is not shown or decided on this page.'),
          h('p', {}, h('a', { href: link, id: 'foreign-proposal-link' }, 'Open proposal ' + foreign.id + ' on ticket ' + foreign.ticket_id))));
      return;
    }
    if (!s) {
      fill(box, h('h2', { id: 'proposal-h', tabindex: '-1' }, 'Proposal'),
        h('p', { class: 'muted', id: 'no-proposal' }, this.shownId ? 'Loading proposal ' + this.shownId + '…' : 'No proposal yet: it appears here as soon as the draft is written.'));
      return;
    }
    const state = s.record ? s.record.state : this.status.state;
    const subs = s.subs;
    const views = (s.draft && s.draft.cancellations) || (this.conversation && this.conversation.proposal_id === s.id ? this.conversation.cancellations : []) || [];
    const cancellations = subs.length === 0
      ? h('p', { id: 'no-cancellations' }, 'No subscription is cancelled.')
      : h('ul', { class: 'cancellations', id: 'cancellations' }, subs.map((id) => {
        const v = views.find((c) => c.subscription_id === id) || {};
        return h('li', { 'data-subscription': id },
          h('strong', {}, 'Cancel subscription ' + id),
          h('dl', { class: 'facts' },
            h('dt', {}, 'Plan'), h('dd', {}, v.plan || 'not known'),
            h('dt', {}, 'Status when drafted'), h('dd', {}, v.status || 'not known'),
            v.customer_id ? [h('dt', {}, 'Customer'), h('dd', {}, v.customer_id)] : null,
            h('dt', {}, 'Asked in'),
            h('dd', {}, v.asked_in
              ? [h('span', {}, 'comment ' + v.asked_in.id + ' by ' + (ROLE_WORDS[v.asked_in.author_role] || v.asked_in.author_role) + ', '), when(v.asked_in.at, false),
                v.asked_in.excerpt ? h('blockquote', {}, v.asked_in.excerpt) : null]
              : 'no comment cited (check the conversation below)')));
      }));
    const update = s.update ? h('p', { id: 'ticket-update' }, 'With the reply, the ticket is set to ' +
      (s.update.status ? 'status “' + s.update.status + '”' : 'its current status') +
      (s.update.tags && s.update.tags.length ? ', tags ' + s.update.tags.join(', ') : '') + '.') : null;
    const decision = s.record ? decisionLine(s.record) : null;
    fill(box,
      h('h2', { id: 'proposal-h', tabindex: '-1' }, 'Proposal'),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Proposal'), h('dd', {}, h('code', { id: 'shown-proposal-id' }, s.id)),
        h('dt', {}, 'State'), h('dd', {}, stateBadge(state, 'proposal-state')),
        s.record ? [h('dt', {}, 'Drafted'), h('dd', { id: 'proposal-drafted' }, when(s.record.created_at))] : null,
        decision ? [h('dt', {}, 'Decision'), h('dd', { id: 'decision' }, decision)] : null,
        s.record && s.record.error && state === 'failed' ? [h('dt', {}, 'What happened'), h('dd', { id: 'proposal-error' }, s.record.error)] : null),
      h('h3', {}, 'Reply to the customer (' + plural([...s.reply].length, 'character', 'characters') + ')'),
      h('div', { class: 'reply', id: 'reply' }, s.reply),
      update,
      h('h3', {}, 'Cancellations'),
      cancellations,
      this.renderRefusal(),
      this.decidable(s.id, state) ? this.renderDecide(s, state) : null);
  }

  // decidable says whether the page offers Approve and Reject: while the
  // proposal awaits a decision, and, once offered, still after the page
  // learns that it was superseded or expired. Controls do not vanish
  // under a person about to press them; the API refuses, and the page
  // explains why and offers the current proposal.
  decidable(id, state) {
    if (this.foreignRecord()) return false;
    if (state === 'awaiting_approval') {
      this.offered = id;
      return true;
    }
    const refused = this.refusal && this.refusal.proposalId === id;
    return this.offered === id && !refused && (state === 'superseded' || state === 'expired');
  }

  renderDecide(s, state) {
    if (!has('approver')) {
      return h('p', { class: 'muted', id: 'no-decide' }, 'Approving and rejecting need the approver role; token "' + session.name + '" does not have it.');
    }
    const reason = h('textarea', { id: 'reject-reason', name: 'reason', maxlength: '2000' });
    const approve = h('button', { type: 'button', class: 'primary', id: 'approve' }, 'Approve and send');
    const reject = h('button', { type: 'button', class: 'danger', id: 'reject' }, 'Reject');
    if (this.busy) { approve.disabled = true; reject.disabled = true; }
    approve.addEventListener('click', () => this.decide('approve', s.id, approve, reject));
    reject.addEventListener('click', () => this.decide('reject', s.id, approve, reject, reason.value));
    if (this.draftReason) reason.value = this.draftReason;
    reason.addEventListener('input', () => { this.draftReason = reason.value; });
    return h('div', { class: 'panel', id: 'decide' },
      h('h3', {}, 'Decide'),
      state !== 'awaiting_approval' ? h('p', { class: 'notice', id: 'no-longer-waiting' },
        'This proposal is no longer waiting for a decision (' + stateWords(state).toLowerCase() + '): approving or rejecting it will be refused.') : null,
      h('p', { class: 'small muted' }, 'Approving posts this reply publicly and cancels the subscriptions listed, as proposal ' + s.id + '. '),
      h('div', { class: 'row' }, approve),
      h('div', { class: 'field' }, h('label', { for: 'reject-reason' }, 'Reason for rejecting (optional)'), reason),
      h('div', { class: 'row' }, reject));
  }

  async decide(verb, proposalId, approve, reject, reason) {
    if (this.busy) return; // one request per decision, however many clicks
    this.busy = true;
    approve.disabled = true;
    reject.disabled = true;
    this.refusal = null;
    announce(verb === 'approve' ? 'Approving…' : 'Rejecting…');
    try {
      const body = verb === 'reject' && reason ? { reason } : {};
      await api('POST', '/proposals/' + encodeURIComponent(proposalId) + '/' + verb, body);
      this.draftReason = '';
      announce(verb === 'approve' ? 'Approved. The reply and cancellations are being carried out.' : 'Rejected.');
    } catch (e) {
      this.refusal = { verb, proposalId, error: e };
      announce('Refused: ' + this.refusalWords(this.refusal).join(' '));
    } finally {
      this.busy = false;
    }
    this.record = null;
    await this.refresh();
    const target = document.getElementById(this.refusal ? 'refusal' : 'proposal-h');
    if (target) target.focus();
  }

  refusalWords(r) {
    const e = r.error;
    const type = (e.problem && e.problem.type) || '';
    const rec = this.record && this.record.id === r.proposalId ? this.record : null;
    const verb = r.verb === 'approve' ? 'approved' : 'rejected';
    if (!(e instanceof HttpError)) {
      // The request may have reached the API and only its answer been
      // lost: a decision is recorded once, so asking again is safe.
      return ['The API\'s answer did not arrive (' + e.message + '), so the proposal may have been ' + verb + ' all the same. ' +
        'Trying again is safe: a proposal is decided only once, and a second try is refused with what happened.'];
    }
    const words = [];
    if (e.status === 409 && type.endsWith('/proposal-not-awaiting-approval')) {
      words.push('This proposal can no longer be ' + verb + ': it is not the one waiting for a decision.');
      const why = {
        superseded: 'The customer wrote again, so a newer draft replaced it.',
        expired: 'It waited too long and expired.',
        rejected: 'It was already rejected' + (rec && rec.rejected_by ? ' by ' + rec.rejected_by : '') + '.',
        executing: 'It was already approved' + (rec && rec.approved_by ? ' by ' + rec.approved_by : '') + ' and is being carried out.',
        done: 'It was already approved' + (rec && rec.approved_by ? ' by ' + rec.approved_by : '') + ' and carried out.',
        failed: 'It was already approved and its execution failed.',
      }[rec && rec.state];
      if (why) words.push(why);
    } else if (e.status === 409 && type.endsWith('/ticket-answered-elsewhere')) {
      words.push('Another proposal answers this ticket (one is being carried out, or went out after this one was drafted), so this one cannot go out too.');
    } else if (e.status === 409 && type.endsWith('/proposal-conflict')) {
      words.push('This proposal was approved before with other content; nothing was changed.');
    } else if (e.status === 403) {
      words.push('This token may not do that.');
    } else if (e.status === 404) {
      words.push('The API does not know this proposal.');
    } else {
      words.push('The API refused (' + e.status + '), so nothing was ' + verb + '.');
    }
    return words;
  }

  renderRefusal() {
    const r = this.refusal;
    if (!r || r.proposalId !== this.shownId) return null;
    const e = r.error;
    return h('div', { class: 'notice bad', id: 'refusal', role: 'alert', tabindex: '-1' },
      this.refusalWords(r).map((w) => h('p', {}, w)),
      e instanceof HttpError && e.problem.detail ? h('p', { class: 'small muted' }, 'The API said: ' + e.problem.detail) : null,
      e instanceof HttpError && e.status === 409
        ? h('button', { type: 'button', class: 'show-current', id: 'show-current', onclick: () => this.showCurrent() }, 'Show the current proposal')
        : null);
  }

  renderExecution() {
    const box = this.el.execution;
    const rec = this.ownRecord();
    if (!rec || !rec.approved_at) { fill(box); return; }
    const a = this.action;
    const parts = [h('h2', { id: 'execution-h' }, 'What was done')];
    if (!a || !rec.actions || a.key !== rec.actions[0].key) {
      parts.push(h('p', { class: 'muted', id: 'execution-state' }, 'The execution is starting…'));
      fill(box, ...parts);
      return;
    }
    parts.push(h('p', {}, 'Execution: ', h('span', { class: 'state ' + (a.state === 'applied' ? 'state-ok' : ['pending', 'applying'].includes(a.state) ? 'state-wait' : 'state-bad'), id: 'execution-state', 'data-state': a.state },
      ACTION_WORDS[a.state] || a.state), a.attempts > 1 ? ' (' + a.attempts + ' attempts)' : '', '; updated ', when(a.updated_at)));
    parts.push(h('table', { id: 'legs' },
      h('caption', {}, 'Each step, in the order it runs'),
      h('thead', {}, h('tr', {}, ['Step', 'State', 'What landed'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, a.legs.map((l) => h('tr', { 'data-kind': l.kind, 'data-target': l.target, 'data-state': l.state },
        h('td', {}, legTitle(l)),
        h('td', {}, h('span', { class: 'state ' + (l.state === 'done' ? 'state-ok' : l.state === 'pending' ? 'state-wait' : 'state-bad') }, LEG_WORDS[l.state] || l.state)),
        h('td', {}, legLanded(l, a)))))));
    if (a.error && a.state !== 'applied') parts.push(h('p', { id: 'execution-error' }, 'What happened: ' + a.error));
    if (rec.state === 'failed' || ['needs_attention', 'failed', 'partial_failure'].includes(a.state)) {
      if (has('operator')) {
        const retry = h('button', { type: 'button', id: 'retry' }, 'Retry the execution');
        retry.addEventListener('click', () => this.retry(rec.id, retry));
        parts.push(h('div', { class: 'panel' },
          h('p', {}, 'A retry runs the same steps again with the same keys: what landed is skipped, the reply goes last.'),
          retry, this.retryResult ? h('p', { id: 'retry-result', role: 'status' }, this.retryResult) : null));
      } else {
        parts.push(h('p', { class: 'muted', id: 'no-retry' }, 'An operator may retry this execution (the operator role); token "' + session.name + '" does not have it.'));
      }
    }
    fill(box, ...parts);
  }

  async retry(proposalId, button) {
    if (this.retrying) return;
    this.retrying = true;
    button.disabled = true;
    try {
      const r = await api('POST', '/proposals/' + encodeURIComponent(proposalId) + '/retry');
      this.retryResult = r.joined ? 'A retry was already running; following it.' : 'Retry started by ' + session.name + '.';
    } catch (e) {
      this.retryResult = e instanceof HttpError && e.status === 409
        ? 'Nothing to retry: ' + (e.problem.detail || 'the execution cannot run again now') + '.'
        : 'The retry could not start: ' + e.message;
    } finally {
      this.retrying = false;
    }
    announce(this.retryResult);
    await this.refresh();
  }

  renderConversation() {
    const box = this.el.conversation;
    // Only the shown proposal's conversation (an answer for one shown
    // before is not this one's); with none shown, the draft's current one.
    const c = this.conversation && (this.shownId ? this.conversation.proposal_id === this.shownId : this.conversationFor === '')
      ? this.conversation : null;
    const head = h('h2', { id: 'conversation-h' }, 'The conversation as the model saw it');
    if (!c) {
      const err = this.conversationFor === (this.shownId || '') ? this.conversationError : null;
      fill(box, head, h('p', { class: 'muted', id: 'no-conversation' }, err || 'Shown once the draft has read the ticket.'));
      return;
    }
    fill(box, head,
      h('p', {}, 'Subject: ', h('strong', {}, c.subject || '(none)'), c.requester_name ? ' · Customer: ' + c.requester_name : ''),
      c.drafted ? null : h('p', { class: 'muted small' }, 'The model is reading this now.'),
      c.omitted_comments ? h('p', { class: 'notice' }, plural(c.omitted_comments, 'comment was', 'comments were') + ' left out to fit the model\'s limit (the first and the newest are kept).') : null,
      c.previous_attempt ? h('div', { class: 'notice' }, h('p', {}, 'The model was told an earlier approved reply was not sent:'), h('p', {}, c.previous_attempt)) : null,
      h('p', { class: 'small muted' }, 'Active subscriptions the model was given: ' + (c.active_subscriptions.length ? c.active_subscriptions.join(', ') : 'none')),
      h('ol', { class: 'comments', id: 'comments' }, c.comments.map((cm) => h('li', { class: 'comment role-' + cm.author_role, 'data-role': cm.author_role, 'data-comment': cm.id },
        h('p', { class: 'meta' }, h('span', { class: 'who' }, ROLE_WORDS[cm.author_role] || cm.author_role), h('span', { class: 'muted small' }, 'comment ' + cm.id + ', '), when(cm.at, false)),
        h('p', { class: 'body' }, cm.body)))));
  }

  renderHistory() {
    const box = this.el.history;
    const others = (this.history || []).filter((p) => p.id !== this.shownId);
    if (others.length === 0) { fill(box); return; }
    fill(box, h('h2', { id: 'history-h' }, 'Other proposals of this ticket'),
      h('ul', {}, others.map((p) => h('li', { 'data-proposal': p.id },
        h('a', { href: '#/tickets/' + this.ticket + '?proposal=' + encodeURIComponent(p.id) }, 'Proposal ' + p.id), ': ',
        stateBadge(p.state), ', drafted ', when(p.created_at), '. ', decisionLine(p)))));
  }
}

function legTitle(l) {
  switch (l.kind) {
    case 'cancel_subscription': return 'Cancel subscription ' + l.target;
    case 'ticket_update': return 'Update the ticket (status and tags)';
    case 'reply': return 'Post the reply on ticket ' + l.target;
    default: return l.kind + ' ' + l.target;
  }
}

function legLanded(l, a) {
  if (l.state === 'done') {
    if (l.kind === 'reply') return 'Reply posted as comment ' + (l.external_id || a.comment_id || '(id not reported)');
    if (l.kind === 'cancel_subscription') return 'Subscription ' + l.target + ' cancelled' + (l.external_id ? ' (' + l.external_id + ')' : '');
    if (l.kind === 'ticket_update') return 'Ticket updated';
    return 'Done' + (l.external_id ? ' (' + l.external_id + ')' : '');
  }
  if (l.error) return 'What happened: ' + l.error;
  if (l.state === 'pending') return a.state === 'needs_attention' ? 'Held back: not sent' : 'Not yet';
  return '';
}

// ---------- start ----------

window.addEventListener('hashchange', () => { if (session.token && isRoute(location.hash)) route(); });
window.addEventListener('DOMContentLoaded', async () => {
  // The skip link moves the focus to the content without changing the hash.
  document.getElementById('skip-link').addEventListener('click', (ev) => {
    ev.preventDefault();
    document.getElementById('main').focus();
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (!saved) { renderSignIn(); return; }
  try {
    await signIn(saved);
  } catch (e) {
    if (e instanceof HttpError && e.status === 401) signOut('The saved token is no longer accepted. Sign in again.');
    else renderSignIn('Could not reach the API (' + e.message + '). Reload to try again.');
  }
});
