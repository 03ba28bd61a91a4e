/*
 * A stand-in for Zendesk's ZAF SDK (zaf_sdk.min.js) for the sidebar app's
 * browser test (tests/zendesk_app_test.go). The test's server serves it in
 * place of https://static.zdassets.com/zendesk_app_framework_sdk/2.0/zaf_sdk.min.js,
 * preceded by window.__zafStandinConfig:
 *   { data: {"ticket.id": 123, ...},  the values client.get answers
 *     metadata: {settings: {...}},    what client.metadata() answers (no secure settings)
 *     proxy: "/zaf-proxy",            where requests go, as Zendesk's proxy
 *     timeScale: 0.01 }               optional: the app's setTimeout delays are
 *                                     scaled by it (recorded unscaled in
 *                                     window.__zaf.timeouts), so a test sees
 *                                     minutes of polling in seconds
 *
 * It answers as the ZAF client documents
 * (https://developer.zendesk.com/api-reference/apps/apps-core-api/client_api/):
 *   - get(path | [paths]) resolves {"ticket.id": 123, "errors": {}}; an
 *     unknown path is reported in errors, and a single unknown path rejects
 *     (as the SDK's processResponse does);
 *   - metadata() resolves the installation's metadata, whose settings hold
 *     no secure setting (those are only usable in secure requests);
 *   - request(options) sends the request through the test's proxy, which
 *     fills in {{setting.NAME}} for secure settings server-side when
 *     options.secure is true; it resolves with the body (parsed when JSON)
 *     on 2xx, or with {status, headers, responseJSON, responseText} when
 *     options.httpCompleteResponse is set, and rejects with {status,
 *     statusText, responseText} otherwise; options.timeout (ms) makes an
 *     unanswered request reject with status 0, statusText 'timeout';
 *   - invoke(name, ...args) records the call in window.__zaf.invoked and
 *     resolves; 'ticket.editor.insert' is also kept in window.__zaf.inserted,
 *     and rejects (inserting nothing) while window.__zaf.failInsert is true;
 *   - on('app.registered') fires once, after init, with the metadata and
 *     context, as the framework's handshake does; window.__zaf.fire(name,
 *     data) fires any other event (app.activated, app.deactivated) on every
 *     client, as Zendesk does when the agent switches tabs.
 * Every request's options are kept in window.__zaf.requests, so the test
 * can see what the app sent (placeholders, never the token). Every answered
 * request and every insert gets the next number of one sequence in
 * window.__zaf.events ({seq, kind: 'response' | 'insert', ...}), so a test
 * can tell which came first.
 */
(function () {
  'use strict';
  var config = window.__zafStandinConfig || {};
  var record = (window.__zaf = { invoked: [], inserted: [], requests: [], gets: [], events: [], timeouts: [], failInsert: false });
  var clients = [];
  var seq = 0;
  function event(e) { e.seq = ++seq; record.events.push(e); }
  record.fire = function (name, data) {
    clients.forEach(function (c) { c._fire(name, data); });
  };

  // The stand-in's own timers run at the real pace; the app's are scaled.
  var realSetTimeout = window.setTimeout.bind(window);
  var realClearTimeout = window.clearTimeout.bind(window);
  if (config.timeScale > 0 && config.timeScale !== 1) {
    window.setTimeout = function (fn, ms) {
      var args = Array.prototype.slice.call(arguments, 2);
      record.timeouts.push(ms || 0);
      return realSetTimeout.apply(window, [fn, (ms || 0) * config.timeScale].concat(args));
    };
  } else {
    window.setTimeout = function (fn, ms) {
      var args = Array.prototype.slice.call(arguments, 2);
      record.timeouts.push(ms || 0);
      return realSetTimeout.apply(window, [fn, ms].concat(args));
    };
  }

  function copy(v) { return v === undefined ? undefined : JSON.parse(JSON.stringify(v)); }

  function Client() {
    this._handlers = {};
    this._registered = false;
    var self = this;
    clients.push(this);
    realSetTimeout(function () {
      self._registered = true;
      self._fire('app.registered', { metadata: copy(config.metadata), context: self._context() });
    }, 0);
  }

  Client.prototype._context = function () {
    return {
      product: 'support',
      location: 'ticket_sidebar',
      instanceGuid: 'standin-instance',
      account: { subdomain: 'standin' },
      ticketId: (config.data || {})['ticket.id']
    };
  };

  Client.prototype._fire = function (name, data) {
    (this._handlers[name] || []).forEach(function (h) { h(data); });
  };

  Client.prototype.on = function (name, handler, context) {
    if (typeof handler !== 'function') return;
    (this._handlers[name] = this._handlers[name] || []).push(context ? handler.bind(context) : handler);
  };

  Client.prototype.off = function (name, handler) {
    var list = this._handlers[name] || [];
    var i = list.indexOf(handler);
    if (i >= 0) list.splice(i, 1);
    return handler;
  };

  Client.prototype.has = function (name, handler) {
    return (this._handlers[name] || []).indexOf(handler) >= 0;
  };

  Client.prototype.metadata = function () {
    return Promise.resolve(copy(config.metadata));
  };

  Client.prototype.context = function () {
    return Promise.resolve(this._context());
  };

  Client.prototype.get = function (path) {
    var paths = Array.isArray(path) ? path : [path];
    if (arguments.length > 1 || paths.some(function (s) { return typeof s !== 'string'; })) {
      throw new Error('The get method accepts a string or array of strings.');
    }
    record.gets.push(paths.slice());
    var data = config.data || {};
    var result = { errors: {} };
    paths.forEach(function (p) {
      if (Object.prototype.hasOwnProperty.call(data, p)) {
        result[p] = copy(data[p]);
      } else {
        result.errors[p] = { name: 'APIUnavailable', message: '"' + p + '" Could not find handler for: "' + p + '"', path: p };
      }
    });
    if (typeof path === 'string' && result.errors[path]) {
      var err = new Error(result.errors[path].message);
      err.name = result.errors[path].name;
      return Promise.reject(err);
    }
    return Promise.resolve(result);
  };

  Client.prototype.set = function () {
    return Promise.reject(new Error('the stand-in does not set'));
  };

  Client.prototype.invoke = function (name) {
    if (typeof name !== 'string') throw new Error('Invoke only supports string arguments.');
    var args = Array.prototype.slice.call(arguments, 1);
    record.invoked.push({ name: name, args: copy(args) });
    if (name === 'ticket.editor.insert') {
      if (record.failInsert) {
        event({ kind: 'insert-refused' });
        return Promise.reject(new Error('ticket.editor.insert refused (window.__zaf.failInsert)'));
      }
      record.inserted.push(args[0]);
      event({ kind: 'insert' });
    }
    return Promise.resolve({ errors: {} });
  };

  Client.prototype.request = function (options) {
    if (typeof options === 'string') options = { url: options };
    record.requests.push(copy(options));
    var body = {
      url: options.url,
      type: (options.type || 'GET').toUpperCase(),
      headers: options.headers || {},
      contentType: options.contentType || '',
      data: typeof options.data === 'string' ? options.data : (options.data === undefined ? '' : JSON.stringify(options.data)),
      secure: options.secure === true
    };
    var abort = new AbortController();
    var timedOut = false;
    var timer = options.timeout > 0 ? realSetTimeout(function () { timedOut = true; abort.abort(); }, options.timeout) : null;
    return fetch(config.proxy || '/zaf-proxy', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal: abort.signal
    }).then(function (res) {
      return res.text().then(function (text) {
        realClearTimeout(timer);
        event({ kind: 'response', type: body.type, url: body.url, status: res.status });
        if (res.status >= 200 && res.status < 300) {
          var json = (res.headers.get('Content-Type') || '').indexOf('json') >= 0 || options.dataType === 'json';
          var parsed = json && text !== '' ? JSON.parse(text) : text;
          if (options.httpCompleteResponse) {
            var headers = {};
            res.headers.forEach(function (v, k) { headers[k] = v; });
            return { status: res.status, headers: headers, responseJSON: json ? parsed : undefined, responseText: text };
          }
          return parsed;
        }
        throw { status: res.status, statusText: res.statusText, responseText: text };
      });
    }, function () {
      realClearTimeout(timer);
      event({ kind: 'response', type: body.type, url: body.url, status: 0 });
      throw { status: 0, statusText: timedOut ? 'timeout' : 'error', responseText: '' };
    });
  };

  window.ZAFClient = {
    init: function () {
      return new Client();
    }
  };
})();
