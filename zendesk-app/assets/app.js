/*
 * supportflow's Zendesk ticket-sidebar app (Zendesk Apps Framework v2).
 *
 * It shows the draft of the ticket being viewed (GET /tickets/{id}/draft),
 * requests one (POST /tickets/{id}/drafts), links to the draft's page in
 * the supervisor console, and offers "Reply myself" under the insert rule
 * below. The API is described in docs/api.md; the app in docs/zendesk-app.md.
 *
 * Secrets: every call goes through client.request with secure: true and the
 * {{setting.api_token}} placeholder in the Authorization header, so
 * Zendesk's proxy fills the token in server-side and the browser never
 * holds it. Secure settings are not in client.metadata(); they can only be
 * used this way, for a host listed in the manifest's domainWhitelist:
 * https://developer.zendesk.com/documentation/apps/app-developer-guide/making-api-requests-from-a-zendesk-app/
 * The manifest scopes the token to headers
 * (https://developer.zendesk.com/documentation/apps/getting-started/setting-up-new-apps/#scopes),
 * and text the agent controls (their name) is sent with "{{" and "}}"
 * removed, so it can never be a placeholder the proxy fills.
 * client.request cannot read a Server-Sent Events stream, so the app polls.
 *
 * The insert rule: the app puts a proposal's reply into the ticket editor
 * only where that cannot make the customer receive it twice.
 *   - Never for a proposal supportflow posts itself (approved, executing,
 *     done): the agent would send a second copy.
 *   - "Reply myself" is offered only for a proposal awaiting approval that
 *     proposes a reply and cancels no subscription (rejecting one that
 *     cancels would drop the cancellation the reply may announce), while a
 *     worker answers for the draft. It calls
 *     POST /proposals/{id}/reply-myself (approver role), which rejects the
 *     proposal (a rejected proposal is never executed, so supportflow never
 *     posts it) and hands its reply to exactly one caller: the app inserts
 *     the reply of a 200 answer only. Every other agent or tab gets 409
 *     reply-already-taken, is told who took it, and inserts nothing; so
 *     does a refused rejection (approved in the console, superseded,
 *     expired).
 *
 * All text from the API is shown with textContent, never as HTML. Nothing
 * from the ticket or the draft is written to the console.
 */
(function () {
  'use strict';

  // How often the draft is read again: often while the model works (or a
  // redraft starts), rarely while a person (or the execution) decides;
  // never once it has settled. A failed read is tried again after
  // SLOW_POLL_MS, doubling each time up to MAX_BACKOFF_MS.
  var FAST_POLL_MS = 2000;
  var SLOW_POLL_MS = 15000;
  var MAX_BACKOFF_MS = 120000;
  // A call Zendesk's proxy has not answered by then fails, so a hung call
  // frees the buttons.
  var REQUEST_TIMEOUT_MS = 20000;
  var DRAFT_REASON = 'zendesk-app';
  // A draft requested for a ticket supportflow does not know yet (404
  // unknown-ticket: Zendesk's webhook has not reported it) is requested
  // again with the same backoff, at most this many times.
  var MAX_REQUEST_TRIES = 10;

  var STATES = {
    none: 'No draft for this ticket yet',
    gathering: 'Gathering the conversation',
    drafting: 'Drafting a reply',
    awaiting_approval: 'Waiting for approval',
    executing: 'Approved: supportflow is posting it',
    done: 'Done: supportflow posted it',
    rejected: 'Rejected',
    superseded: 'Superseded: the customer wrote again; redrafting',
    expired: 'Expired without a decision',
    failed: 'Failed'
  };
  // superseded is not final: the draft continues as a redraft.
  var WORKING = { gathering: true, drafting: true, superseded: true };
  var FINAL = { done: true, rejected: true, expired: true, failed: true };

  var client = ZAFClient.init();
  var app = {
    apiUrl: '',
    ticketId: 0,
    agent: '',
    draft: null, // the last draft read; null when the ticket has none
    loaded: false,
    busy: false, // a request or a takeover is under way
    timer: null,
    reading: 0, // sequence of draft reads: only the newest one renders
    stopped: false,
    hidden: false, // between app.deactivated and app.activated
    failures: 0, // reads failed in a row
    requestTries: 0, // requests refused unknown-ticket in a row
    requestTimer: null, // the next of those, while one is due
    readError: false, // the message shown is a failed read's
    replyTaken: false, // this ticket's reply went to an agent: no new draft from here
    height: 0
  };

  function el(id) { return document.getElementById(id); }

  function show(id, on) { el(id).hidden = !on; }

  function setText(id, text) {
    el(id).textContent = text;
    show(id, text !== '');
  }

  function say(text) {
    app.readError = false;
    setText('message', text);
    resize();
  }

  // noPlaceholders removes "{{" and "}}" from text the agent controls, so
  // that nothing sent can be a {{setting.NAME}} placeholder.
  function noPlaceholders(text) {
    var s = String(text);
    while (/\{\{|\}\}/.test(s)) s = s.replace(/\{\{|\}\}/g, '');
    return s;
  }

  // api calls supportflow through Zendesk's proxy. It resolves with the
  // parsed body on 2xx (with {status, responseJSON, ...} when complete is
  // set) and rejects with the response ({status, responseText})
  // otherwise, as the ZAF client documents:
  // https://developer.zendesk.com/api-reference/apps/apps-core-api/client_api/#clientrequestoptions
  function api(method, path, body, complete) {
    var options = {
      url: app.apiUrl + path,
      type: method,
      cors: false,
      secure: true,
      headers: { Authorization: 'Bearer {{setting.api_token}}' },
      dataType: 'json',
      timeout: REQUEST_TIMEOUT_MS
    };
    if (complete) options.httpCompleteResponse = true;
    if (body !== undefined) {
      options.contentType = 'application/json';
      options.data = JSON.stringify(body);
    }
    return client.request(options);
  }

  // problem reads an RFC 9457 problem from a refused request.
  function problem(err) {
    try {
      var p = JSON.parse((err && err.responseText) || '');
      return p && typeof p === 'object' ? p : {};
    } catch (e) {
      return {};
    }
  }

  function problemType(err) { return String(problem(err).type || ''); }

  // explain says in words why a call failed.
  function explain(err, what) {
    var status = (err && err.status) || 0;
    var p = problem(err);
    var type = String(p.type || '');
    if (status === 0) return 'Could not reach supportflow to ' + what + ' (no answer within ' + (REQUEST_TIMEOUT_MS / 1000) + ' s, or no connection).';
    if (status === 401) return 'supportflow did not accept the app\'s API token (401): check the app\'s API token setting.';
    if (status === 403 && !type) {
      // Not supportflow's problem document: Zendesk's proxy refused to
      // send the secure token to a host missing from domainWhitelist.
      return 'Zendesk refused to send the request (403): the host of the app\'s api_url must be in domainWhitelist in the app\'s manifest.json.';
    }
    if (status === 403) return 'The app\'s API token may not ' + what + ' (403' + (p.detail ? ': ' + p.detail : '') + ').';
    if (status === 404 && /unknown-ticket/.test(type)) return 'supportflow does not know this ticket yet: Zendesk\'s webhook has not reported it. Trying again.';
    if (status === 409) return 'supportflow refused to ' + what + ': ' + (p.title || 'conflict') + (p.detail ? ' (' + p.detail + ')' : '') + '. The draft below is the current one.';
    if (status === 503) return 'supportflow is unavailable (503); trying again.';
    return 'Could not ' + what + ' (' + status + (p.title ? ': ' + p.title : '') + ').';
  }

  function canReplyMyself(d) {
    if (app.replyTaken) return false;
    if (!d || d.state !== 'awaiting_approval' || d.worker_unavailable || !d.proposal) return false;
    var reply = d.proposal.reply;
    var cancels = d.proposal.cancel_subscriptions || [];
    return typeof reply === 'string' && reply.trim() !== '' && cancels.length === 0;
  }

  function progressText(d) {
    var p = d.progress;
    if (!p || !WORKING[d.state]) return '';
    var parts = [];
    if (p.step) parts.push(p.step);
    parts.push((p.tokens || 0) + (p.tokens === 1 ? ' token' : ' tokens') + ' so far');
    if (p.attempt > 1) parts.push('attempt ' + p.attempt);
    return parts.join(', ');
  }

  function cancelsText(proposal) {
    var n = (proposal.cancel_subscriptions || []).length;
    if (n === 0) return 'No subscription';
    return n + (n === 1 ? ' subscription' : ' subscriptions');
  }

  function render() {
    var d = app.draft;
    var state = d ? d.state : 'none';
    el('status').textContent = app.loaded ? (STATES[state] || ('State: ' + state)) : 'Loading…';
    show('draft', !!d);
    if (d) {
      var progress = progressText(d);
      setText('progress', progress);
      show('progress-label', progress !== '');
      var proposal = d.proposal;
      setText('cancellations', proposal ? cancelsText(proposal) : '');
      show('cancellations-label', !!proposal);
      setText('approved-by', d.approved_by || '');
      show('approved-label', !!d.approved_by);
      var notes = [];
      if (d.worker_unavailable) notes.push('No worker answered: this is read from the database and may lag.');
      if (d.error) notes.push(d.error);
      setText('note', notes.join(' '));
      var reply = proposal && typeof proposal.reply === 'string' ? proposal.reply : '';
      setText('reply', reply);
      show('reply-heading', reply !== '');
    }
    // Once an agent took this ticket's reply, a new draft could answer
    // the customer a second time: none is requested from here until the
    // app is loaded again.
    show('request-draft', app.loaded && !app.replyTaken && (!d || !!FINAL[state]));
    show('reply-myself', app.loaded && canReplyMyself(d));
    el('request-draft').disabled = app.busy;
    el('reply-myself').disabled = app.busy;
    resize();
  }

  // resize fits the sidebar's iframe to the page:
  // https://developer.zendesk.com/api-reference/apps/apps-core-api/all_locations/#resize
  function resize() {
    var h = Math.ceil(document.documentElement.scrollHeight);
    if (h !== app.height) {
      app.height = h;
      client.invoke('resize', { width: '100%', height: h + 'px' });
    }
  }

  // schedule reads the draft again in ms; nothing is scheduled while the
  // app is hidden (app.activated reads it again).
  function schedule(ms) {
    clearTimeout(app.timer);
    app.timer = null;
    if (ms > 0 && !app.stopped && !app.hidden) app.timer = setTimeout(refresh, ms);
  }

  function nextPoll(d) {
    if (!d || FINAL[d.state]) return 0;
    return WORKING[d.state] ? FAST_POLL_MS : SLOW_POLL_MS;
  }

  // backoff is the wait before the next read after a failed one.
  function backoff() {
    app.failures++;
    return Math.min(SLOW_POLL_MS * Math.pow(2, app.failures - 1), MAX_BACKOFF_MS);
  }

  function readOK() {
    app.failures = 0;
    app.loaded = true;
    if (app.readError) say('');
  }

  // refresh reads the draft and renders it; it keeps polling while the
  // draft is live, and tries a failed read again with backoff.
  function refresh() {
    var seq = ++app.reading;
    schedule(0);
    return api('GET', '/tickets/' + app.ticketId + '/draft').then(function (d) {
      if (seq !== app.reading) return;
      app.draft = d && typeof d === 'object' ? d : null;
      readOK();
      render();
      schedule(nextPoll(app.draft));
    }, function (err) {
      if (seq !== app.reading) return;
      var status = (err && err.status) || 0;
      if (status === 404 && /no-draft/.test(problemType(err))) {
        app.draft = null;
        readOK();
        render();
        return;
      }
      say(explain(err, 'read the draft'));
      app.readError = true;
      render();
      // A passing outage, or a ticket Zendesk's webhook has not reported
      // yet: try again, less and less often. A refusal (401, 403) stays.
      if (status === 0 || status >= 500 || status === 429 || (status === 404 && /unknown-ticket/.test(problemType(err)))) {
        schedule(backoff());
      }
    });
  }

  // requestDraft asks for a draft (a click, or a retry when retry is
  // true). A ticket supportflow does not know yet is asked for again,
  // less and less often, up to MAX_REQUEST_TRIES times.
  function requestDraft(retry) {
    if (app.busy || app.replyTaken) return;
    clearTimeout(app.requestTimer);
    app.requestTimer = null;
    if (retry !== true) app.requestTries = 0;
    app.busy = true;
    say('Requesting a draft…');
    render();
    api('POST', '/tickets/' + app.ticketId + '/drafts', { reason: DRAFT_REASON }).then(function () {
      app.requestTries = 0;
      say('');
    }, function (err) {
      if (err && err.status === 404 && /unknown-ticket/.test(problemType(err))) {
        app.requestTries++;
        if (app.requestTries < MAX_REQUEST_TRIES) {
          var ms = Math.min(SLOW_POLL_MS * Math.pow(2, app.requestTries - 1), MAX_BACKOFF_MS);
          say('supportflow does not know this ticket yet (Zendesk\'s webhook has not reported it): asking again in ' + Math.round(ms / 1000) + ' s.');
          if (!app.hidden) app.requestTimer = setTimeout(function () { requestDraft(true); }, ms);
          return;
        }
        app.requestTries = 0;
        say('supportflow still does not know this ticket after ' + MAX_REQUEST_TRIES + ' tries: check Zendesk\'s webhook, then request a draft again.');
        return;
      }
      app.requestTries = 0;
      say(explain(err, 'request a draft'));
    }).then(function () {
      app.busy = false;
      return refresh();
    });
  }

  // toEditorHTML makes plain text safe for ticket.editor.insert, which
  // takes HTML (Zendesk's example inserts 'My <b>printer</b> is on fire'):
  // https://developer.zendesk.com/api-reference/apps/apps-support-api/ticket_editor/
  // It escapes first, then keeps the text's shape: line breaks become
  // <br>, and runs of spaces non-breaking spaces.
  function toEditorHTML(text) {
    return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;')
      .replace(/\r\n|\r|\n/g, '<br>')
      .replace(/ {2,}/g, function (run) { return new Array(run.length + 1).join('&nbsp;'); });
  }

  // takenText says who took a reply, from a 409 reply-already-taken.
  function takenText(p) {
    var who = p.on_behalf_of ? p.on_behalf_of + ' (through ' + (p.taken_by || 'the API') + ')' : (p.taken_by || 'someone');
    var when = '';
    var t = p.taken_at ? new Date(p.taken_at) : null;
    if (t && !isNaN(t.getTime())) when = ' at ' + t.toLocaleTimeString();
    return 'Already taken: ' + who + ' is replying to this ticket themselves (taken' + when + ').';
  }

  // replyMyself applies the insert rule: the API rejects the proposal and
  // hands its reply to this call alone (200), or says who took it (409).
  function replyMyself() {
    var d = app.draft;
    if (app.busy || !canReplyMyself(d)) return;
    var proposalId = d.proposal.id;
    app.busy = true;
    say('Rejecting the proposal so supportflow cannot post it…');
    render();
    var body = {};
    if (app.agent) body.on_behalf_of = app.agent;
    api('POST', '/proposals/' + encodeURIComponent(proposalId) + '/reply-myself', body, true).then(function (res) {
      var taken = res && res.status === 200 ? res.responseJSON : null;
      if (typeof taken === 'string') {
        try { taken = JSON.parse(taken); } catch (e) { taken = null; }
      }
      if (!taken || taken.state !== 'rejected' || taken.proposal_id !== proposalId || typeof taken.reply !== 'string') {
        say('supportflow did not confirm that the reply is yours: nothing was inserted.');
        return;
      }
      app.replyTaken = true;
      return client.invoke('ticket.editor.insert', toEditorHTML(taken.reply)).then(function () {
        say('Rejected in supportflow; the reply is in the editor for you to edit and send.');
      }, function () {
        say('Rejected in supportflow, but Zendesk did not insert the text: copy it from the reply above and send it yourself.');
      });
    }, function (err) {
      if (err && err.status === 409 && /reply-already-taken/.test(problemType(err))) {
        app.replyTaken = true;
        say(takenText(problem(err)) + ' Nothing was inserted.');
        return;
      }
      say(explain(err, 'take the reply') + ' Nothing was inserted.');
    }).then(function () {
      app.busy = false;
      return refresh();
    });
  }

  function fail(text) {
    app.stopped = true;
    schedule(0);
    el('status').textContent = 'supportflow is not available here';
    say(text);
  }

  // apiURL reads the api_url setting: HTTPS, or plain HTTP to this
  // machine for a local trial; "" otherwise.
  function apiURL(setting) {
    var url = String(setting || '').trim().replace(/\/+$/, '');
    if (!/^https?:\/\/[^\s\/?#]+(\/[^\s?#]*)?$/i.test(url)) return '';
    if (/^https:/i.test(url)) return url;
    return /^http:\/\/(127\.0\.0\.1|localhost)(:\d+)?(\/|$)/i.test(url) ? url : '';
  }

  el('request-draft').addEventListener('click', function () { requestDraft(false); });
  el('reply-myself').addEventListener('click', replyMyself);

  // Nothing is read while the app is hidden; it reads again when shown:
  // https://developer.zendesk.com/api-reference/apps/apps-core-api/core_api/#events
  client.on('app.deactivated', function () {
    app.hidden = true;
    schedule(0);
    clearTimeout(app.requestTimer);
    app.requestTimer = null;
  });
  client.on('app.activated', function () {
    app.hidden = false;
    if (!app.ticketId || app.stopped) return;
    // A draft request that was waiting for the ticket is made now.
    if (app.requestTries > 0 && !app.busy) requestDraft(true);
    else refresh();
  });

  Promise.all([client.metadata(), client.get(['ticket.id', 'currentUser.name'])]).then(function (r) {
    var settings = (r[0] && r[0].settings) || {};
    var url = apiURL(settings.api_url);
    if (!url) {
      fail('The app\'s api_url setting must be an https:// URL (http:// only for 127.0.0.1 or localhost, for a local trial).');
      return;
    }
    var ticketId = Number(r[1]['ticket.id']);
    if (!(ticketId > 0) || Math.floor(ticketId) !== ticketId) {
      fail('No ticket is open here.');
      return;
    }
    app.apiUrl = url;
    app.ticketId = ticketId;
    app.agent = noPlaceholders(r[1]['currentUser.name'] || '').slice(0, 200);
    // The console forbids framing, so it opens in its own window.
    var link = el('open-console');
    link.href = url + '/console/#/tickets/' + ticketId;
    link.hidden = false;
    return refresh();
  }).catch(function () {
    fail('Could not read the ticket from Zendesk.');
  });
})();
