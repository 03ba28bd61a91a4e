// Package standin provides in-process stand-ins for the SaaS APIs that
// supportflow acts on. They speak the real wire protocol, so the real client
// libraries run against them; they inject faults (see Fault) and count every
// effect, so a test can assert that an action happened exactly once.
//
// # Zendesk
//
// Zendesk (NewZendesk) serves the subset of the Zendesk Support API v2 that
// github.com/nukosuke/go-zendesk sends, under /api/v2: show ticket, update
// ticket (which appends a comment and an audit on every call, since Zendesk
// does not deduplicate), list comments and list audits with offset
// pagination. Point a go-zendesk client at it with
// SetEndpointURL(server.URL + "/api/v2").
//
// # Subscription service
//
// Subscriptions (NewSubscriptions) is supportflow's own subscription service.
// Its protocol, which package subscriptions implements the client side of:
//
//   - Every request carries "Authorization: Bearer <token>"; otherwise the
//     answer is 401 {"error":"unauthorized","message":"..."}.
//   - POST /v1/subscriptions/{id}/cancel cancels an active subscription and
//     answers 200 {"id":"...","status":"cancelled","cancelled_at":"<RFC 3339>"}.
//     A subscription that is already cancelled answers 409
//     {"error":"already_cancelled","message":"...","cancelled_at":"<RFC 3339>"};
//     an unknown one answers 404 {"error":"not_found","message":"..."}.
//     supportflow requires the service to deduplicate on the Idempotency-Key
//     header: a cancel whose key that subscription's cancel already answered
//     gets the first answer again (status and body) and has no second
//     effect. Without the header every request is handled afresh.
//   - GET /v1/subscriptions/{id} answers 200 {"id":"...","customer_id":"...",
//     "plan":"..." (when it has one),"status":"active"|"cancelled",
//     "cancelled_at":"..." (when cancelled)} or 404. supportflow reads it to
//     learn whether a cancel landed and whose the subscription is.
//   - Other errors use the same {"error":"<code>","message":"..."} shape,
//     and 429 and 503 may carry Retry-After.
//
// # Model
//
// Model (NewModel) is an OpenAI-compatible chat-completions server, so the
// drafting code runs its real client (openai-go) without a model. It serves
// only POST /v1/chat/completions; point a client at server.URL + "/v1".
// With an API key it requires "Authorization: Bearer <key>"; errors use
// OpenAI's shape {"error":{"message","type","param","code"}} (401
// invalid_api_key, 400 for a malformed body or no messages). With
// "stream": true it streams chat.completion.chunk events, one word per
// chunk, then a chunk with finish_reason "stop", a usage chunk when
// stream_options.include_usage is set, and "data: [DONE]"; otherwise it
// answers one chat.completion.
//
// Its default answer is deterministic. It reads the last user message as
// the drafting code's JSON document ({"subject", "requester_name",
// "comments": [{"author": "requester"|"end_user"|"agent"|"supportflow", "body"}],
// "active_subscriptions"}) and answers {"reply": "...",
// "cancel_subscriptions": [...]}: a greeting by name, and a cancellation of
// every active subscription when the requester's last comment mentions
// "cancel" (an author of "customer", the older label, counts as the
// requester). SetResponder replaces the answer. ModelFault injects what
// models do wrong: error statuses, slowness, slow or silent streams, and
// answers that are not JSON.
//
// # BigQuery
//
// BigQuery (NewBigQuery) serves the BigQuery REST v2 calls that
// cloud.google.com/go/bigquery makes for Query.Read on its fast path, under
// /bigquery/v2 (and without the prefix): jobs.query (POST
// projects/{p}/queries), jobs.getQueryResults (GET projects/{p}/queries/{job},
// with maxResults, startIndex and pageToken) and jobs.get (GET
// projects/{p}/jobs/{job}). Point a client at server.URL + BigQueryBasePath
// with option.WithoutAuthentication. It does not run SQL: every query is
// answered as supportflow's customer lookup (package bqlookup), one row of
// customer_id, email, lifetime_orders and active_subscriptions (REPEATED)
// for the customer seeded for the INT64 parameter @requester_id, in
// BigQuery's f/v row encoding with int64 values as strings. A query in
// legacy SQL, without that parameter, or with the requester ID's digits in
// its text is refused with 400 invalidQuery, so tests show that values are
// never spliced into SQL. Retries with the same requestId get the same job.
// Errors use BigQuery's shape {"error": {"code", "message", "errors":
// [{"reason", "message", "domain"}], "status"}}; unknown paths and jobs
// (or a job asked for in another location) answer 404 notFound.
// BigQueryFault injects error statuses with reasons, slowness, and jobs
// that finish late (PendingPolls) or never (StayRunning).
//
// # Running outside tests
//
// Each stand-in is an http.Handler: serve it with httptest in tests, or with
// Listen in the local run and in separate worker processes.
package standin

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// writeJSON answers status with v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only our own response types are encoded here, so this is a bug.
		http.Error(w, "stand-in: encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// loggedRequest is one request as seen on arrival.
type loggedRequest struct {
	method string
	path   string
}

// requestLog records every request a stand-in received, faulted or not.
type requestLog struct {
	mu   sync.Mutex
	reqs []loggedRequest
}

func (l *requestLog) add(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, loggedRequest{method: r.Method, path: r.URL.Path})
}

// count returns how many requests had the method ("" for any) and a path
// starting with pathPrefix.
func (l *requestLog) count(method, pathPrefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if (method == "" || strings.EqualFold(method, r.method)) && strings.HasPrefix(r.path, pathPrefix) {
			n++
		}
	}
	return n
}

// deepCopyJSON copies a value decoded by encoding/json into interface
// values, so callers can't mutate the stand-in's state through it.
func deepCopyJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopyJSON(e)
		}
		return out
	default:
		return v
	}
}
