/*
 * A stand-in for Zendesk's ZAF SDK (zaf_sdk.min.js) for the sidebar app's
 * browser test (tests/zendesk_app_test.go). The test's server serves it in
 * place of https://static.zdassets.com/zendesk_app_framework_sdk/2.0/zaf_sdk.min.js,
 * preceded by window.__zafStandinConfig:
 *   { data: {"ticket.id": 123, ...},  the values client.get answers
 *     metadata: {settings: {...}},    what client.metadata() answers (no secure settings)
 *     proxy: "/zaf-proxy" }           where requests go, as Zendesk's proxy
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
 *     on 2xx and rejects with {status, statusText, responseText} otherwise;
 *   - invoke(name, ...args) records the call in window.__zaf.invoked and
 *     resolves; 'ticket.editor.insert' is also kept in window.__zaf.inserted;
 *   - on('app.registered') fires once, after init, with the metadata and
 *     context, as the framework's handshake does.
 * Every request's options are kept in window.__zaf.requests, so the test
 * can see what the app sent (placeholders, never the token).
 */
(function () {
  'use strict';
  var config = window.__zafStandinConfig || {};
  var record = (window.__zaf = { invoked: [], inserted: [], requests: [], gets: [] });

  function copy(v) { return v === undefined ? undefined : JSON.parse(JSON.stringify(v)); }

  function Client() {
    this._handlers = {};
    this._registered = false;
    var self = this;
    setTimeout(function () {
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
    if (name === 'ticket.editor.insert') record.inserted.push(args[0]);
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
    return fetch(config.proxy || '/zaf-proxy', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body)
    }).then(function (res) {
      return res.text().then(function (text) {
        if (res.status >= 200 && res.status < 300) {
          var json = (res.headers.get('Content-Type') || '').indexOf('json') >= 0 || options.dataType === 'json';
          if (json && text !== '') return JSON.parse(text);
          return text;
        }
        throw { status: res.status, statusText: res.statusText, responseText: text };
      });
    }, function () {
      throw { status: 0, statusText: 'error', responseText: '' };
    });
  };

  window.ZAFClient = {
    init: function () {
      return new Client();
    }
  };
})();
