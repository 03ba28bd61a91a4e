// Package api is supportflow's HTTP API for apps not written in Go, and
// the Zendesk webhook. It is a thin layer over the starter package and the
// ledger: every request is authenticated (a bearer token, or the webhook's
// signature), bodies are capped and decoded strictly, and every error is an
// RFC 9457 problem+json document that says what was wrong. A request that
// is refused starts and writes nothing.
//
// Each API token has a name and roles (Token); every route but the webhook,
// the codec server and the health endpoints needs the role in brackets, and
// a decision is recorded under the name of the token that made it.
//
//	POST /tickets/{id}/drafts           [app] start (or join) the ticket's draft: 202 + status URL
//	GET  /tickets/{id}/draft            [app] the draft's state, progress, proposal, error
//	GET  /tickets/{id}/draft/events     [app] Server-Sent Events of state and progress, until it settles (at most MaxStreamsPerToken open per token)
//	POST /proposals/{id}/approve        [approver] approve the current proposal
//	POST /proposals/{id}/reject         [approver] reject it
//	POST /proposals/{id}/reply-myself   [approver] reject it and take its reply to send by hand, once (409 for every other taker)
//	POST /proposals/{id}/retry          [operator] run a failed approved proposal again (same keys)
//	GET  /actions/{key}                 [app] an action's ledger row
//	GET  /whoami                        [any token] the token's name and roles
//	GET  /proposals                     [app] proposals, newest first (?state=, ?ticket_id=, ?limit=)
//	GET  /proposals/{id}                [app] one proposal, its decision and what took its place
//	GET  /tickets/{id}/draft/conversation [app] the conversation the model saw (?proposal_id=)
//	GET  /console/                      the supervisor console's page and assets (no token; /console redirects)
//	POST /webhooks/zendesk              Zendesk's ticket event webhooks (signed; see webhook)
//	POST /codec/encode, /codec/decode   the codec server for the Web UI and the temporal CLI (codec tokens; see codec.go)
//	GET  /healthz, /readyz              process up; PostgreSQL and Temporal reachable
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

// Config holds the API's secrets and limits.
type Config struct {
	// Tokens are the accepted bearer tokens with their names and roles
	// (at least one; CheckTokens says what is accepted).
	Tokens []Token
	// WebhookSecret is Zendesk's webhook signing secret (required).
	WebhookSecret string
	// PreviousWebhookSecret is also accepted while a rotation retires it;
	// empty otherwise (docs/security.md, Rotating the webhook signing
	// secret).
	PreviousWebhookSecret string
	// Metrics counts webhook deliveries by answer; nil counts nothing.
	Metrics *telemetry.Metrics
	// MaxSkew bounds how far a webhook's timestamp may be from now; 0
	// means 5 minutes.
	MaxSkew time.Duration
	// MaxBody caps a request body; 0 means 64 KiB.
	MaxBody int64
	// PollInterval is how often the SSE stream reads the draft; 0 means
	// 250 ms.
	PollInterval time.Duration
	// KeepAlive is how often an idle SSE stream sends a comment; 0 means
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// MaxStream bounds one SSE stream; the browser's EventSource then
	// reconnects. 0 means 10 minutes.
	MaxStream time.Duration
	// ZendeskUserID is supportflow's own Zendesk API user: events it
	// caused are recorded but start no lookup and supersede no draft.
	// Required (GET /api/v2/users/me.json with the worker's credentials
	// tells it).
	ZendeskUserID int64
	// MaxWebhookBody caps a webhook body (a ticket event carries the
	// ticket's description and a comment's text and HTML); 0 means 1 MiB.
	MaxWebhookBody int64
	// WebhookRetryAfter is the Retry-After of a webhook answered 503;
	// Zendesk retries only under 60 s. 0 means DefaultWebhookRetryAfter.
	WebhookRetryAfter time.Duration
	// RelayInterval is how often the relay looks for undispatched ticket
	// events when nothing wakes it; 0 means 2 s.
	RelayInterval time.Duration
	// Codec, when set with CodecTokens, serves /codec/encode and
	// /codec/decode: the payload codec the Web UI and the temporal CLI
	// decode histories through. Nil, or no CodecTokens: /codec is 404.
	Codec *codec.Codec
	// CodecTokens are the bearer tokens the codec server accepts (each 16+
	// characters), kept apart from Tokens: reading every customer's text
	// in Temporal is a different grant from driving drafts.
	CodecTokens []string
	// CodecOrigins are the browser origins (the Web UI's, such as
	// https://temporal.example.com) allowed to call the codec server.
	CodecOrigins []string
	// Namespace is the Temporal namespace whose payloads the codec
	// server converts; a request for another is refused.
	Namespace string
	// MaxCodecBody caps a codec request body; 0 means 16 MiB (a few
	// payloads at Temporal's 2 MB limit, base64 encoded).
	MaxCodecBody int64
	// ReadTimeout bounds reading a request body, from when the handler
	// starts reading it (SUPPORTFLOW_HTTP_READ_TIMEOUT); 0 means 10 s.
	ReadTimeout time.Duration
	// WriteTimeout is the write deadline each SSE event (and keep-alive)
	// gets: the stream outlives the server's WriteTimeout, but a client
	// that stops reading is cut off (SUPPORTFLOW_HTTP_WRITE_TIMEOUT). 0
	// lifts the deadline for the stream's life.
	WriteTimeout time.Duration
	// MaxStreamsPerToken caps the SSE streams one token holds open at
	// once; past it a stream is refused 429 with a Retry-After
	// (SUPPORTFLOW_API_MAX_STREAMS_PER_TOKEN). 0 means DefaultMaxStreamsPerToken.
	MaxStreamsPerToken int
	// StreamRetryAfter is the Retry-After of a stream refused 429; 0
	// means 5 s.
	StreamRetryAfter time.Duration
}

// Server serves the API. Build it with New.
type Server struct {
	cfg Config
	// tokens[i] is the token whose secret sums to tokenSums[i].
	tokens    []apiToken
	tokenSums [][32]byte
	starter   *starter.Starter
	ledger    *ledger.Ledger
	proposals *proposals.Store
	pool      *pgxpool.Pool
	temporal  client.Client
	log       *slog.Logger
	now       func() time.Time
	mux       *http.ServeMux
	closing   chan struct{}
	close     sync.Once
	ingest    *ingest.Store
	relay     *ingest.Relay

	codecTokens [][32]byte

	// streams counts each token's open SSE streams (by token name).
	streamsMu sync.Mutex
	streams   map[string]int
}

// Close ends the open SSE streams (http.Server.Shutdown does not wait for
// them otherwise) and the relay started by RunRelay.
func (s *Server) Close() { s.close.Do(func() { close(s.closing) }) }

// RunRelay hands recorded ticket events to Temporal until ctx ends or the
// server closes. Every API process runs one; so does every worker.
func (s *Server) RunRelay(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.relay.Run(ctx)
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("api: configuration")

// New builds the server. It refuses a configuration without tokens or a
// webhook secret rather than serving unauthenticated. The proposals and
// the ticket mirror and events are kept on pool, for l's account.
func New(cfg Config, st *starter.Starter, l *ledger.Ledger, pool *pgxpool.Pool, c client.Client, logger *slog.Logger) (*Server, error) {
	if len(cfg.Tokens) == 0 {
		return nil, fmt.Errorf("%w: at least one API token is required", ErrConfig)
	}
	if cfg.WebhookSecret == "" {
		return nil, fmt.Errorf("%w: the Zendesk webhook signing secret is required", ErrConfig)
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = 5 * time.Minute
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 64 << 10
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.MaxStream == 0 {
		cfg.MaxStream = 10 * time.Minute
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = bodyReadTimeout
	}
	if cfg.MaxStreamsPerToken == 0 {
		cfg.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if cfg.StreamRetryAfter == 0 {
		cfg.StreamRetryAfter = 5 * time.Second
	}
	if cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0 || cfg.MaxStreamsPerToken < 0 || cfg.StreamRetryAfter < time.Second {
		return nil, fmt.Errorf("%w: the read and write timeouts and the stream cap must not be negative, the stream Retry-After at least 1 s", ErrConfig)
	}
	if cfg.ZendeskUserID <= 0 {
		return nil, fmt.Errorf("%w: the Zendesk API user's id is required, to tell supportflow's own writes from the customer's", ErrConfig)
	}
	if cfg.MaxWebhookBody == 0 {
		cfg.MaxWebhookBody = 1 << 20
	}
	if cfg.WebhookRetryAfter == 0 {
		cfg.WebhookRetryAfter = DefaultWebhookRetryAfter
	}
	if cfg.WebhookRetryAfter < time.Second || cfg.WebhookRetryAfter >= time.Minute {
		return nil, fmt.Errorf("%w: the webhook Retry-After must be 1-59 s (Zendesk retries only under 60 s)", ErrConfig)
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cfg: cfg, starter: st, ledger: l, pool: pool, temporal: c, log: logger, now: time.Now, mux: http.NewServeMux(), closing: make(chan struct{}),
		streams: map[string]int{}}
	s.proposals = proposals.New(pool, l.Account())
	s.ingest = ingest.NewStore(pool, l.Account())
	s.relay = ingest.NewRelay(s.ingest, st, logger)
	s.relay.Interval = cfg.RelayInterval
	if err := CheckTokens(cfg.Tokens); err != nil {
		return nil, fmt.Errorf("%w: API tokens: %w", ErrConfig, err)
	}
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, apiToken{name: t.Name, roles: slices.Clone(t.Roles)})
		s.tokenSums = append(s.tokenSums, sha256.Sum256([]byte(t.Secret)))
	}
	s.cfg.Tokens = nil // the sums are all the server needs
	var err error
	if cfg.MaxCodecBody == 0 {
		s.cfg.MaxCodecBody = 16 << 20
	}
	if s.codecTokens, err = hashTokens("codec", cfg.CodecTokens); err != nil {
		return nil, err
	}
	if cfg.Codec != nil && len(s.codecTokens) > 0 {
		s.mux.HandleFunc("/codec/{op}", s.codec)
	}
	for _, rt := range s.routes() {
		s.mux.HandleFunc(rt.pattern, s.authed(rt.role, rt.handler))
	}
	s.mountConsole() // GET /whoami, /proposals, /proposals/{id}, /tickets/{id}/draft/conversation, /console/ (console_routes.go)
	s.mux.HandleFunc("POST /webhooks/zendesk", s.webhook)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "Not found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// ServeHTTP serves a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// route is an authenticated route and the role it needs.
type route struct {
	pattern string
	role    Role
	handler http.HandlerFunc
}

// routes are the routes a bearer token reaches, each with its role.
func (s *Server) routes() []route {
	return []route{
		{"POST /tickets/{id}/drafts", RoleApp, s.startDraft},
		{"GET /tickets/{id}/draft", RoleApp, s.getDraft},
		{"GET /tickets/{id}/draft/events", RoleApp, s.draftEvents},
		{"POST /proposals/{id}/approve", RoleApprover, s.approve},
		{"POST /proposals/{id}/reject", RoleApprover, s.reject},
		{"POST /proposals/{id}/reply-myself", RoleApprover, s.replyMyself},
		{"POST /proposals/{id}/retry", RoleOperator, s.retry},
		{"GET /actions/{key}", RoleApp, s.getAction},
	}
}

// hashTokens keeps the SHA-256 sums of bearer tokens (what bearer
// compares); a token under 16 characters is a configuration error.
func hashTokens(what string, tokens []string) ([][32]byte, error) {
	var sums [][32]byte
	for _, t := range tokens {
		if len(t) < 16 {
			return nil, fmt.Errorf("%w: %s tokens must be at least 16 characters", ErrConfig, what)
		}
		sums = append(sums, sha256.Sum256([]byte(t)))
	}
	return sums, nil
}

// bearer checks the request's bearer token against tokens (SHA-256 sums)
// as matchBearer does, and returns the token's fingerprint (the first 8
// hex digits of its sum) for logs.
func bearer(w http.ResponseWriter, r *http.Request, tokens [][32]byte, realm string) (string, bool) {
	i, ok := matchBearer(w, r, tokens, realm)
	if !ok {
		return "", false
	}
	return hex.EncodeToString(tokens[i][:4]), true
}

// matchBearer checks the request's bearer token against tokens (SHA-256
// sums, each compared in constant time, so neither the answer's timing nor
// which one matched tells a guesser anything) and answers 401 when it is
// missing or not one of them. It returns the matching token's index.
func matchBearer(w http.ResponseWriter, r *http.Request, tokens [][32]byte, realm string) (int, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q`, realm))
		problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "an Authorization: Bearer token is required")
		return 0, false
	}
	sum := sha256.Sum256([]byte(token))
	match, index := 0, 0
	for i, t := range tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t[:])
		match |= eq
		index = subtle.ConstantTimeSelect(eq, i, index)
	}
	if match != 1 {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q, error="invalid_token"`, realm))
		problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "the bearer token is not valid")
		return 0, false
	}
	return index, true
}

// Problem is an RFC 9457 problem details document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func problem(w http.ResponseWriter, status int, slug, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "/problems/" + slug, Title: title, Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ticketID reads the {id} path value (supportflow.ParseTicketID).
func ticketID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := supportflow.ParseTicketID(r.PathValue("id"))
	if err != nil {
		problem(w, http.StatusBadRequest, "invalid-ticket-id", "Invalid ticket id", err.Error())
		return 0, false
	}
	return id, true
}

// decode reads a JSON body strictly: capped, one object, no unknown
// fields. An empty body leaves v as it is when emptyOK.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) bool {
	body, err := s.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", fmt.Sprintf("the body must be at most %d bytes", s.cfg.MaxBody))
			return false
		}
		problem(w, http.StatusBadRequest, "unreadable-body", "Unreadable request body", err.Error())
		return false
	}
	return s.decodeBytes(w, body, v, emptyOK)
}

// bodyReadTimeout is Config.ReadTimeout's default: a request body must be
// read within it, so a client trickling bytes cannot hold a connection.
const bodyReadTimeout = 10 * time.Second

// DefaultMaxStreamsPerToken is Config.MaxStreamsPerToken's default: room
// for one helpdesk app's token shared by every agent's browser, a bound on
// what one leaked or looping token can hold open.
const DefaultMaxStreamsPerToken = 64

// DefaultKeepAlive is Config.KeepAlive's default
// (SUPPORTFLOW_API_SSE_KEEPALIVE's).
const DefaultKeepAlive = 15 * time.Second

// DefaultWebhookRetryAfter is Config.WebhookRetryAfter's default
// (SUPPORTFLOW_WEBHOOK_RETRY_AFTER's).
const DefaultWebhookRetryAfter = 10 * time.Second

// readBody reads a body capped at MaxBody within ReadTimeout.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return s.readCapped(w, r, s.cfg.MaxBody)
}

// readCapped reads a body capped at limit within ReadTimeout, from when
// the handler starts reading it
// (https://pkg.go.dev/net/http#ResponseController.SetReadDeadline).
func (s *Server) readCapped(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

func (s *Server) decodeBytes(w http.ResponseWriter, body []byte, v any, emptyOK bool) bool {
	if len(strings.TrimSpace(string(body))) == 0 {
		if emptyOK {
			return true
		}
		problem(w, http.StatusBadRequest, "malformed-json", "Malformed JSON", "a JSON object body is required")
		return false
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		slug, title := "malformed-json", "Malformed JSON"
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			slug, title = "unknown-field", "Unknown field"
		}
		problem(w, http.StatusBadRequest, slug, title, err.Error())
		return false
	}
	if dec.More() {
		problem(w, http.StatusBadRequest, "malformed-json", "Malformed JSON", "the body has data after its JSON object")
		return false
	}
	return true
}

// internal answers an unexpected error without leaking its details. The
// log has the error's class, and its message only when it cannot quote
// what a workflow or activity said (telemetry.LogError).
//
// A refusal the route did not answer in its own words (a workflow's
// ApplicationError of a known type, or an error wrapping one of the
// contract's sentinels) gets the contract's status instead
// (supportflow.Refusal), named by its type and never by its message.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	if status, name, ok := supportflow.Refusal(err); ok && status < 500 {
		s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "error_type", policy.ErrorClass(err))
		problem(w, status, "refused", http.StatusText(status), "refused: "+name)
		return
	}
	s.log.Error("request failed", append([]any{"method", r.Method, "path", r.URL.Path}, telemetry.LogError(err)...)...)
	problem(w, http.StatusServiceUnavailable, "unavailable", "Service unavailable", "a dependency failed; retry later")
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		problem(w, http.StatusServiceUnavailable, "not-ready", "Not ready", "PostgreSQL is not reachable")
		return
	}
	if _, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		problem(w, http.StatusServiceUnavailable, "not-ready", "Not ready", "Temporal is not reachable")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
