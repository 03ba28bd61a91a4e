/*
 * supportflow's Zendesk ticket-sidebar app (Zendesk Apps Framework v2).
 *
 * It shows the draft of the ticket being viewed (GET /tickets/{id}/draft),
 * requests one (POST /tickets/{id}/drafts), links to the draft's page in
 * the supervisor console, and offers "Reply myself" under the insert rule
 * below. The API is described in docs/api.md; the app in docs/zendesk-app.md.
 *
 * Secrets: every call goes through client.request with secure: true and the
 * {{setting.api_token}} placeholder, so Zendesk's proxy fills the token in
 * server-side and the browser never holds it. Secure settings are not in
 * client.metadata(); they can only be used this way, for a host listed in
 * the manifest's domainWhitelist:
 * https://developer.zendesk.com/documentation/apps/app-developer-guide/making-api-requests-from-a-zendesk-app/
 * client.request cannot read a Server-Sent Events stream, so the app polls.
 *
 * The insert rule: the app puts a proposal's reply into the ticket editor
 * only where that cannot make the customer receive it twice.
 *   - Never for a proposal supportflow posts itself (approved, executing,
 *     done): the agent would send a second copy.
 *   - "Reply myself" is offered only for a proposal awaiting approval that
 *     proposes a reply and cancels no subscription (rejecting one that
 *     cancels would drop the cancellation the reply may announce), while a
 *     worker answers for the draft. It first rejects the proposal
 *     (POST /proposals/{id}/reject, which needs the approver role) and
 *     inserts only once the API has confirmed the rejection: a rejected
 *     proposal can never be approved or executed, so supportflow can never
 *     post it too. A refused rejection (already approved in the console,
 *     superseded, expired) inserts nothing.
 *
 * All text from the API is shown with textContent, never as HTML. Nothing
 * from the ticket or the draft is written to the console.
 */
(function () {
  'use strict';

  // How often the draft is read again: often while the model works, rarely
  // while a person (or the execution) decides; never once it has settled.
  var FAST_POLL_MS = 2000;
  var SLOW_POLL_MS = 15000;
  var REJECT_REASON = 'agent replies from the editor';
  var DRAFT_REASON = 'zendesk-app';

  var STATES = {
    none: 'No draft for this ticket yet',
    gathering: 'Gathering the conversation',
    drafting: 'Drafting a reply',
    awaiting_approval: 'Waiting for approval',
    executing: 'Approved: supportflow is posting it',
    done: 'Done: supportflow posted it',
    rejected: 'Rejected',
    superseded: 'Superseded: the customer wrote again',
    expired: 'Expired without a decision',
    failed: 'Failed'
  };
  var WORKING = { gathering: true, drafting: true };
  var SETTLED = { done: true, rejected: true, superseded: true, expired: true, failed: true };

  var client = ZAFClient.init();
  var app = {
    apiUrl: '',
    ticketId: 0,
    agent: '',
    draft: null, // the last draft read; null when the ticket has none
    loaded: false,
    busy: false, // a request or rejection is under way
    timer: null,
    reading: 0, // sequence of draft reads: only the newest one renders
    stopped: false,
    height: 0
  };

  function el(id) { return document.getElementById(id); }

  function show(id, on) { el(id).hidden = !on; }

  function setText(id, text) {
    el(id).textContent = text;
    show(id, text !== '');
  }

  function say(text) { setText('message', text); resize(); }

  // api calls supportflow through Zendesk's proxy. It resolves with the
  // parsed body on 2xx and rejects with the response ({status,
  // responseText}) otherwise, as the ZAF client documents:
  // https://developer.zendesk.com/api-reference/apps/apps-core-api/client_api/#clientrequestoptions
  function api(method, path, body) {
    var options = {
      url: app.apiUrl + path,
      type: method,
      cors: false,
      secure: true,
      headers: { Authorization: 'Bearer {{setting.api_token}}' },
      dataType: 'json'
    };
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

  // explain says in words why a call failed.
  function explain(err, what) {
    var status = (err && err.status) || 0;
    var p = problem(err);
    var type = String(p.type || '');
    if (status === 0) return 'Could not reach supportflow to ' + what + '.';
    if (status === 401) return 'supportflow did not accept the app\'s API token (401): check the app\'s API token setting.';
    if (status === 403) return 'The app\'s API token may not ' + what + ' (403' + (p.detail ? ': ' + p.detail : '') + ').';
    if (status === 404 && /unknown-ticket/.test(type)) return 'supportflow does not know this ticket yet: Zendesk\'s webhook has not reported it.';
    if (status === 409) return 'supportflow refused to ' + what + ': ' + (p.title || 'conflict') + '. The draft below is the current one.';
    if (status === 503) return 'supportflow is unavailable (503); try again shortly.';
    return 'Could not ' + what + ' (' + status + (p.title ? ': ' + p.title : '') + ').';
  }

  function canReplyMyself(d) {
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
    show('request-draft', app.loaded && (!d || !!SETTLED[state]));
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

  function schedule(ms) {
    clearTimeout(app.timer);
    app.timer = null;
    if (ms > 0 && !app.stopped) app.timer = setTimeout(refresh, ms);
  }

  function nextPoll(d) {
    if (!d || SETTLED[d.state]) return 0;
    return WORKING[d.state] ? FAST_POLL_MS : SLOW_POLL_MS;
  }

  // refresh reads the draft and renders it; it keeps polling while the
  // draft is live.
  function refresh() {
    var seq = ++app.reading;
    schedule(0);
    return api('GET', '/tickets/' + app.ticketId + '/draft').then(function (d) {
      if (seq !== app.reading) return;
      app.draft = d && typeof d === 'object' ? d : null;
      app.loaded = true;
      render();
      schedule(nextPoll(app.draft));
    }, function (err) {
      if (seq !== app.reading) return;
      if (err && err.status === 404 && /no-draft/.test(String(problem(err).type || ''))) {
        app.draft = null;
        app.loaded = true;
        render();
        return;
      }
      say(explain(err, 'read the draft'));
      render();
      // A passing outage: try again later; a refusal (401, 403) stays.
      if (!err || !err.status || err.status >= 500) schedule(SLOW_POLL_MS);
    });
  }

  function requestDraft() {
    if (app.busy) return;
    app.busy = true;
    say('Requesting a draft…');
    render();
    api('POST', '/tickets/' + app.ticketId + '/drafts', { reason: DRAFT_REASON }).then(function () {
      say('');
    }, function (err) {
      say(explain(err, 'request a draft'));
    }).then(function () {
      app.busy = false;
      return refresh();
    });
  }

  // toEditorHTML makes plain text safe for ticket.editor.insert, which
  // takes HTML (Zendesk's example inserts 'My <b>printer</b> is on fire'):
  // https://developer.zendesk.com/api-reference/apps/apps-support-api/ticket_editor/
  function toEditorHTML(text) {
    return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;').replace(/\r\n|\r|\n/g, '<br>');
  }

  // replyMyself applies the insert rule: reject, and insert only once the
  // API confirms the rejection of this very proposal.
  function replyMyself() {
    var d = app.draft;
    if (app.busy || !canReplyMyself(d)) return;
    var proposalId = d.proposal.id;
    var text = d.proposal.reply;
    app.busy = true;
    say('Rejecting the proposal so supportflow cannot post it…');
    render();
    var body = { reason: REJECT_REASON };
    if (app.agent) body.rejected_by = app.agent;
    api('POST', '/proposals/' + encodeURIComponent(proposalId) + '/reject', body).then(function (res) {
      if (!res || res.state !== 'rejected' || res.proposal_id !== proposalId) {
        say('supportflow did not confirm the rejection: nothing was inserted.');
        return;
      }
      return client.invoke('ticket.editor.insert', toEditorHTML(text)).then(function () {
        say('Rejected in supportflow; the reply is in the editor for you to edit and send.');
      }, function () {
        say('Rejected in supportflow, but Zendesk did not insert the text: copy it from the reply above.');
      });
    }, function (err) {
      say(explain(err, 'reject the proposal') + ' Nothing was inserted.');
    }).then(function () {
      app.busy = false;
      return refresh();
    });
  }

  function fail(text) {
    app.stopped = true;
    el('status').textContent = 'supportflow is not available here';
    say(text);
  }

  el('request-draft').addEventListener('click', requestDraft);
  el('reply-myself').addEventListener('click', replyMyself);

  // Stop polling while the app is hidden; read again when it shows:
  // https://developer.zendesk.com/api-reference/apps/apps-core-api/core_events/
  client.on('app.deactivated', function () { schedule(0); });
  client.on('app.activated', function () {
    if (app.ticketId && !app.stopped && app.loaded) refresh();
  });

  Promise.all([client.metadata(), client.get(['ticket.id', 'currentUser.name'])]).then(function (r) {
    var settings = (r[0] && r[0].settings) || {};
    var url = String(settings.api_url || '').trim().replace(/\/+$/, '');
    if (!/^https?:\/\/[^\s\/?#]+(\/[^\s?#]*)?$/i.test(url)) {
      fail('The app\'s api_url setting is not an http(s) URL.');
      return;
    }
    var ticketId = Number(r[1]['ticket.id']);
    if (!(ticketId > 0) || Math.floor(ticketId) !== ticketId) {
      fail('No ticket is open here.');
      return;
    }
    app.apiUrl = url;
    app.ticketId = ticketId;
    app.agent = String(r[1]['currentUser.name'] || '').slice(0, 200);
    // The console forbids framing, so it opens in its own window.
    var link = el('open-console');
    link.href = url + '/console/#/tickets/' + ticketId;
    link.hidden = false;
    return refresh();
  }).catch(function () {
    fail('Could not read the ticket from Zendesk.');
  });
})();
